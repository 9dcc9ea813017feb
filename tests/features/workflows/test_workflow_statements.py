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
from tests.testapp.models import AtomicJob, WorkflowWake

pytestmark = [
    pytest.mark.django_db(transaction=True),
    every_database("the statements of a park and a wake are each database's"),
]


def statements_of_a_drain(model) -> list[str]:  # type: ignore[no-untyped-def]
    with CaptureQueriesContext(connection) as done:
        Worker(models=[model], burst=True, handle_signals=False).run()
    return [query["sql"] for query in done.captured_queries]


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
    drain = Worker(models=[WorkflowWake], burst=True, handle_signals=False).run().as_dict()
    waiting.refresh_from_db()
    assert (waiting.queue_state, waiting.runs, drain["succeeded"]) == ("succeeded", 2, 1)


def test_an_event_for_a_row_that_is_gone_is_not_kept() -> None:
    row = WorkflowWake.objects.create()
    WorkflowWake.objects.filter(pk=row.pk).delete()
    assert send_event(row, "go") is False
    assert not WorkflowEvent.objects.exists()
