"""What parking and waking a workflow row cost in statements (issue #36: at most two each),
counted as ``assertNumQueries`` counts them (every statement through Django's cursor), on
every database: a run that parks beside an atomic job's run of a one-statement body, and a
``send_event()`` inside the caller's transaction."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from django_dbqueue.models import WorkflowEvent
from django_dbqueue.worker import Worker
from django_dbqueue.workflows import send_event
from tests.conftest import every_database
from tests.features.workflows.drain_statements import drain, of_the_run
from tests.testapp.models import AtomicJob, Ledger, WorkflowWake

pytestmark = [
    pytest.mark.django_db(transaction=True),
    every_database("the statements of a park and a wake are each database's"),
]


def statements_of_a_drain(model) -> list[str]:  # type: ignore[no-untyped-def]
    """What the drain's runs sent, the worker's bookkeeping left out (``drain_statements``):
    the pause snapshot or the schedules re-read under CI's load made one drain longer than
    the other."""
    _, statements = drain(model, (Ledger._meta.db_table,))
    return of_the_run(statements)


def test_a_run_that_parks_costs_at_most_two_statements_more_than_an_atomic_job() -> None:
    # The same shape of drain: one row, a body of one statement (AtomicJob: a ledger INSERT;
    # WorkflowWake: an UPDATE of its run count), then its end.
    AtomicJob.objects.create()
    job = statements_of_a_drain(AtomicJob)
    WorkflowWake.objects.create(nap=3600)
    sleep = statements_of_a_drain(WorkflowWake)
    WorkflowWake.objects.create()  # waits for "go"
    wait = statements_of_a_drain(WorkflowWake)
    print("job:", len(job), "park for a sleep:", len(sleep), "park for an event:", len(wait))
    assert WorkflowWake.objects.filter(queue_state="ready").count() == 2  # both parked
    assert len(sleep) - len(job) <= 2, "\n".join(sleep)
    assert len(wait) - len(job) <= 2, "\n".join(wait)
    if connection.features.has_select_for_update:
        # The row's lock brings its checkpoints and events along: one statement beyond a job.
        assert len(sleep) - len(job) <= 1 and len(wait) - len(job) <= 1, "\n".join(wait)


def test_send_event_is_two_statements_in_the_callers_transaction() -> None:
    waiting = WorkflowWake.objects.create()
    statements_of_a_drain(WorkflowWake)  # parked, waiting for "go"
    elsewhere = WorkflowWake.objects.create(queue_state="idle")  # waits for nothing
    with transaction.atomic(), CaptureQueriesContext(connection) as sent:
        assert send_event(waiting, "go") is True
        assert send_event(elsewhere, "go") is False
    print("\n".join(query["sql"] for query in sent.captured_queries))
    # No savepoint: the event's INSERT (which locks the row) and the wake's fenced UPDATE.
    assert len(sent.captured_queries) == 4
    waiting.refresh_from_db()
    assert waiting.queue_state == "ready"
    drained = Worker(models=[WorkflowWake], burst=True, handle_signals=False).run().as_dict()
    waiting.refresh_from_db()
    assert (waiting.queue_state, waiting.runs, drained["succeeded"]) == ("succeeded", 2, 1)


def test_an_event_for_a_row_that_is_gone_is_not_kept() -> None:
    row = WorkflowWake.objects.create()
    WorkflowWake.objects.filter(pk=row.pk).delete()
    assert send_event(row, "go") is False
    assert not WorkflowEvent.objects.exists()


def test_a_claim_of_several_rows_parks_each_at_most_two_statements_beyond_a_job() -> None:
    """Where rows are locked, a claim of several rows reads their checkpoints in one SELECT
    and each run's first statement is its success UPDATE (as an atomic job's), which a park
    turns into the park in place: a step's run costs its checkpoint's INSERT beyond a job."""
    rows = 10
    AtomicJob.objects.bulk_create([AtomicJob() for _ in range(rows)])
    job = statements_of_a_drain(AtomicJob)
    WorkflowWake.objects.bulk_create([WorkflowWake(nap=3600) for _ in range(rows)])
    sleep = statements_of_a_drain(WorkflowWake)
    print("per row: job", len(job) / rows, "park for a sleep", len(sleep) / rows)
    assert WorkflowWake.objects.filter(queue_state="ready").count() == rows
    assert (len(sleep) - len(job)) / rows <= 2, "\n".join(sleep)


def test_a_park_in_place_gives_the_row_back_what_its_success_overwrote() -> None:
    """The success written first set the finishing time, cleared the last error and negated
    the token; the park in place makes the row READY again as any park does, keeping the last
    error it had and not counting the attempt."""
    earlier = WorkflowWake.objects.create(nap=3600, queue_last_error="an earlier attempt's error")
    fresh = WorkflowWake.objects.create(nap=3600)
    stats = Worker(models=[WorkflowWake], burst=True, handle_signals=False).run().as_dict()
    assert stats["parked"] == 2
    for row, error in ((earlier, "an earlier attempt's error"), (fresh, "")):
        row.refresh_from_db()
        assert (row.queue_state, row.queue_last_error, row.queue_attempts) == ("ready", error, 0)
        assert (row.queue_token, row.queue_locked_by, row.queue_finished_at) == (None, None, None)
        assert row.runs == 1
