"""What a 1-step workflow run sends (issue #36's step-cost floor), pinned on every database so
it cannot drift back: beside an atomic job's run, a claim's rows' checkpoints and events are
read in one once-built SELECT (none on SQLite, where each run's locking read brings
them), and each run writes its one checkpoint (an INSERT); nothing else touches the workflow
tables, and the run's queue statements are an atomic job's."""

from __future__ import annotations

import collections

import pytest
from django.db import connection

from django_dbqueue.backends import backend_for
from django_dbqueue.models import WorkflowStep
from tests.conftest import every_database
from tests.features.workflows.drain_statements import drain, kinds
from tests.testapp.models import AtomicJob, AtomicWorkflow, Ledger, StepLedger

pytestmark = [
    pytest.mark.django_db(transaction=True),
    every_database("the statements of a workflow step are each database's"),
]

ROWS = 10


def kinds_of_a_drain(model, body: tuple[str, ...]) -> collections.Counter[tuple[str, str]]:  # type: ignore[no-untyped-def]
    """The drain's statements by (first word, where): see ``drain_statements``."""
    stats, statements = drain(model, body, batch_size=ROWS)
    assert stats.succeeded == ROWS, stats.as_dict()
    return kinds(statements)


def test_a_one_step_workflow_run_sends_an_atomic_jobs_statements_and_its_checkpoint() -> None:
    AtomicJob.objects.bulk_create([AtomicJob() for _ in range(ROWS)])
    job = kinds_of_a_drain(AtomicJob, (Ledger._meta.db_table,))
    AtomicWorkflow.objects.bulk_create([AtomicWorkflow(steps=1) for _ in range(ROWS)])
    run = kinds_of_a_drain(AtomicWorkflow, (StepLedger._meta.db_table,))
    print("job:", dict(job), "\nworkflow:", dict(run))
    workflow_tables = {key: n for key, n in run.items() if key[1] in ("checkpoints", "events", "progress")}
    # The step's body reads its checkpoint (StepLedger's after_checkpoint): one SELECT of the
    # checkpoints per row that is the body's, not the run's.
    body_reads = ROWS
    if backend_for(connection.alias).skip_locked:
        # One claim of ROWS rows: its checkpoints and its events in one SELECT (a UNION ALL of
        # both tables, sorted as "checkpoints"), built once.
        assert workflow_tables == {
            ("SELECT", "checkpoints"): 1 + body_reads,
            ("INSERT", "checkpoints"): ROWS,
        }
        queue = {key: n for key, n in run.items() if key[1] == "queue"}
        assert queue == {key: n for key, n in job.items() if key[1] == "queue"}
    else:
        # SQLite: each run's locking read joins its checkpoints and events (one SELECT).
        assert workflow_tables == {
            ("SELECT", "checkpoints"): ROWS + body_reads,
            ("INSERT", "checkpoints"): ROWS,
        }
    assert AtomicWorkflow.objects.filter(queue_state="succeeded").count() == ROWS
    assert WorkflowStep.objects.count() == ROWS


@pytest.mark.parametrize("result", [None, {"stock": [1, 2]}, False])
def test_a_steps_checkpoint_is_the_row_and_instance_the_generic_insert_makes(result: object) -> None:
    """``insert_step()`` (the statement and constants made once per shape) stores and returns
    what ``insert()`` (every column named per call) does for the same step."""
    from datetime import datetime, timedelta, timezone

    from django_dbqueue.workflows.statements import step_statements

    statements = step_statements(connection.alias)
    started = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)
    finished = started + timedelta(seconds=1)
    step = {"model": "testapp.AtomicWorkflow", "name": "reserve", "position": 2, "result": result}
    generic = statements.insert(
        object_pk="1", kind=WorkflowStep.STEP, started_at=started, finished_at=finished, **step
    )
    fields = [
        field.attname
        for field in WorkflowStep._meta.concrete_fields
        if field.attname not in ("id", "object_pk")
    ]
    for object_pk in ("2", "3"):  # the shape made, then reused
        made = statements.insert_step(object_pk=object_pk, started_at=started, finished_at=finished, **step)
        assert made.object_pk == object_pk and made.pk is None
        assert {field: getattr(made, field) for field in fields} == {
            field: getattr(generic, field) for field in fields
        }
    stored = {
        row["object_pk"]: {field: row[field] for field in fields} for row in WorkflowStep.objects.values()
    }
    assert stored["2"] == stored["1"] and stored["3"] == stored["1"]
