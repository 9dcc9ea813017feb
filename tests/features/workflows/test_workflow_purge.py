"""A workflow row's checkpoints, events and progress go with the row (issue #36): purged with
the messages ``purgequeue`` deletes, deleted with a row the ORM deletes (the admin, a
queryset's ``delete()``), and swept by ``purgequeue --workflow-orphans`` where they were left
behind; a new row that reuses a deleted row's pk starts its workflow afresh."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.models import Count
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_dbqueue.models import Message, WorkflowEvent, WorkflowProgress, WorkflowStep
from django_dbqueue.states import QueueState
from django_dbqueue.worker import Worker
from django_dbqueue.workflows import send_event
from tests.conftest import every_database
from tests.testapp.models import AtomicWorkflow, LeaseWorkflow, StepLedger

pytestmark = [
    pytest.mark.django_db(transaction=True),
    every_database("deletes by key lists and pk reuse go through each database"),
]

TABLES = (WorkflowStep, WorkflowEvent, WorkflowProgress)


def drain(model) -> None:
    Worker(models=[model], burst=True, handle_signals=False).run()


def workflow_rows(label: str, pk) -> dict[str, int]:
    """How many rows each workflow table holds for the row ``label`` ``pk``."""
    return {t.__name__: t.objects.filter(model=label, object_pk=str(pk)).count() for t in TABLES}


def give_workflow_rows(label: str, pk) -> None:
    """A checkpoint, an event not received and a progress row, as a run leaves them."""
    now = timezone.now()
    key = {"model": label, "object_pk": str(pk)}
    WorkflowStep.objects.create(**key, name="step-1", position=1, started_at=now, finished_at=now, result=1)
    WorkflowEvent.objects.create(**key, name="paid", data=2, sent_at=now)
    WorkflowProgress.objects.create(**key, fraction=0.5, updated_at=now)


ALL = {"WorkflowStep": 1, "WorkflowEvent": 1, "WorkflowProgress": 1}
NONE = dict.fromkeys(ALL, 0)


def test_purgequeue_deletes_the_workflow_rows_of_the_messages_it_purges(capsys) -> None:
    Message.objects.publish_many([{"kind": "test.echo", "payload": {"i": i}} for i in range(7)])
    messages = list(Message.objects.order_by("pk"))
    old, young = messages[:5], messages[5:]
    Message.objects.filter(pk__in=[m.pk for m in old]).update(
        queue_state=QueueState.SUCCEEDED, queue_finished_at=timezone.now() - timedelta(days=3)
    )
    for message in messages:
        give_workflow_rows("django_dbqueue.Message", message.pk)
    give_workflow_rows("testapp.AtomicWorkflow", old[0].pk)  # another model's row, same pk

    call_command(
        "purgequeue", "django_dbqueue.Message", "--older-than", "1d", "--batch-size", "2", "--pause", "0"
    )

    assert "5 finished row(s) deleted" in capsys.readouterr().out
    for message in old:
        assert workflow_rows("django_dbqueue.Message", message.pk) == NONE
    for message in young:
        assert workflow_rows("django_dbqueue.Message", message.pk) == ALL
    assert workflow_rows("testapp.AtomicWorkflow", old[0].pk) == ALL


@pytest.mark.parametrize("model", [AtomicWorkflow, LeaseWorkflow])
@pytest.mark.parametrize("how", ["instance", "queryset"])
def test_a_deleted_workflow_row_takes_its_rows_along_and_its_pk_starts_afresh(model, how) -> None:
    row = model.objects.create(steps=2, event="paid")
    keep = model.objects.create(steps=2, event="paid")
    drain(model)  # step 1 ran; both wait for "paid", with their progress written
    send_event(row, "paid", "late")
    send_event(keep, "other", "kept")
    label, pk = model._meta.label, row.pk
    WorkflowProgress.objects.create(model=label, object_pk=str(pk), fraction=0.5, updated_at=timezone.now())
    assert workflow_rows(label, pk) == {"WorkflowStep": 2, "WorkflowEvent": 1, "WorkflowProgress": 1}

    if how == "instance":
        row.delete()
    else:
        model.objects.filter(pk=pk).delete()

    assert workflow_rows(label, pk) == NONE
    assert workflow_rows(label, keep.pk) == {"WorkflowStep": 2, "WorkflowEvent": 1, "WorkflowProgress": 0}
    # A new row under the same pk (SQLite reuses the highest one; any database after a
    # truncation): its first step runs, not the old row's checkpoint.
    StepLedger.objects.all().delete()
    model.objects.create(pk=pk, steps=2)
    drain(model)
    ran = StepLedger.objects.filter(job_id=pk).values("step").annotate(n=Count("id"))
    assert {item["step"]: item["n"] for item in ran} == {1: 1, 2: 1}


def test_a_queryset_delete_takes_the_workflow_rows_of_its_rows_in_one_batch() -> None:
    """Not three DELETEs per row: the receivers note the rows at pre_delete and delete the
    workflow rows of all of them at the first post_delete, so 2 rows and 30 rows cost the
    same statements."""
    label = AtomicWorkflow._meta.label
    counts = []
    for n in (2, 30):
        rows = [AtomicWorkflow.objects.create(steps=1) for _ in range(n + 1)]
        for row in rows:
            give_workflow_rows(label, row.pk)
        with CaptureQueriesContext(connection) as done:
            AtomicWorkflow.objects.filter(pk__in=[row.pk for row in rows[:n]]).delete()
        counts.append(len(done.captured_queries))
        assert all(workflow_rows(label, row.pk) == NONE for row in rows[:n])
        assert workflow_rows(label, rows[n].pk) == ALL
        AtomicWorkflow.objects.all().delete()
    assert counts[0] == counts[1]


def test_workflow_orphans_are_swept_in_batches_and_live_rows_kept(capsys) -> None:
    live = [AtomicWorkflow.objects.create(steps=1) for _ in range(3)]
    for row in live:
        give_workflow_rows("testapp.AtomicWorkflow", row.pk)
    gone = [live[-1].pk + n for n in range(1, 5)]  # rows deleted behind the ORM's back
    for pk in gone:
        give_workflow_rows("testapp.AtomicWorkflow", pk)
    give_workflow_rows("testapp.AtomicWorkflow", "not-a-number")  # no row can have it
    give_workflow_rows("gone.Model", 1)  # a model not installed: left alone

    call_command("purgequeue", "--workflow-orphans", "--dry-run", "--batch-size", "2", "--pause", "0")
    assert "WorkflowStep: 5 row(s) of workflow rows that are gone to purge" in capsys.readouterr().out
    assert WorkflowStep.objects.count() == 3 + 4 + 1 + 1

    call_command("purgequeue", "--workflow-orphans", "--batch-size", "2", "--pause", "0")
    out = capsys.readouterr().out
    for table in ("WorkflowStep", "WorkflowEvent", "WorkflowProgress"):
        assert f"{table}: 5 row(s) of workflow rows that are gone deleted" in out
    assert "gone.Model is not an installed model: its workflow rows were kept" in out
    for row in live:
        assert workflow_rows("testapp.AtomicWorkflow", row.pk) == ALL
    for pk in [*gone, "not-a-number"]:
        assert workflow_rows("testapp.AtomicWorkflow", pk) == NONE
    assert workflow_rows("gone.Model", 1) == ALL
