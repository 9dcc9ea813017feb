"""The statements of a worker's drain, sorted by what they touch, for the tests that pin what a
workflow run costs beside an atomic job's run.

A drain also sends the worker's bookkeeping (the table check at start, the registry, the
schedules, the pause snapshot re-read when a poll interval has passed), which depends on how
long the drain took, not on what a run sends: CI's loaded runs read the pauses or the schedules
once more in one drain than in the other. Those are sorted as "worker" so the tests compare
the rest."""

from __future__ import annotations

import collections

from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_dbqueue.models import WorkflowEvent, WorkflowProgress, WorkflowStep
from django_dbqueue.worker import Worker
from django_dbqueue.worker.stats import WorkerStats

WORKFLOW_TABLES = {
    WorkflowStep._meta.db_table: "checkpoints",
    WorkflowEvent._meta.db_table: "events",
    WorkflowProgress._meta.db_table: "progress",
}


def where(sql: str, model, body: tuple[str, ...]) -> str:  # type: ignore[no-untyped-def]
    """A workflow table's name, "body" (the handler's effects, ``body`` being its tables),
    "queue" (the model's own table) or "worker" (the rest)."""
    workflow = next((name for table, name in WORKFLOW_TABLES.items() if table in sql), None)
    if workflow is not None:
        return workflow
    if any(table in sql for table in body):
        return "body"
    if model._meta.db_table in sql:
        return "queue"
    return "worker"


def first_word(sql: str) -> str:
    return sql.split(None, 1)[0].upper()


def drain(model, body: tuple[str, ...] = (), **options) -> tuple[WorkerStats, list[tuple[str, str, str]]]:  # type: ignore[no-untyped-def]
    """Drain ``model`` with a burst worker: its counts, and each statement as (first word,
    where, SQL). A transaction's BEGIN and COMMIT are "queue" when a statement inside it is
    not the worker's, else "worker" (the registry's heartbeat is a transaction of its own)."""
    with CaptureQueriesContext(connection) as done:
        stats = Worker(models=[model], burst=True, handle_signals=False, **options).run()
    statements: list[tuple[str, str, str]] = []
    opened: int | None = None
    for query in done.captured_queries:
        sql, word = query["sql"], first_word(query["sql"])
        if word == "BEGIN":
            opened = len(statements)
        elif word in ("COMMIT", "ROLLBACK") and opened is not None:
            inside = {place for _, place, _ in statements[opened + 1 :]}
            place = "worker" if inside <= {"worker"} else "queue"
            statements[opened] = (statements[opened][0], place, statements[opened][2])
            statements.append((word, place, sql))
            opened = None
            continue
        statements.append((word, where(sql, model, body), sql))
    return stats, statements


def kinds(statements: list[tuple[str, str, str]]) -> collections.Counter[tuple[str, str]]:
    """The statements counted by (first word, where)."""
    return collections.Counter((word, place) for word, place, _ in statements)


def of_the_run(statements: list[tuple[str, str, str]]) -> list[str]:
    """The SQL of what the runs sent: the worker's bookkeeping left out."""
    return [sql for _, place, sql in statements if place != "worker"]
