"""``purgequeue``: bounded deletes and archiving of queue-owned rows, never domain rows."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from django_dbqueue.models import ArchivedMessage, Batch, JobDependency, JobWait, Message, QueueAttempt
from django_dbqueue.states import QueueState

pytestmark = pytest.mark.django_db(transaction=True)


def finished(n: int, state: str, days_ago: float) -> None:
    Message.objects.publish_many([{"kind": "test.echo", "payload": {"i": i}} for i in range(n)])
    ids = list(Message.objects.filter(queue_state=QueueState.READY).values_list("pk", flat=True))
    Message.objects.filter(pk__in=ids).update(
        queue_state=state, queue_finished_at=timezone.now() - timedelta(days=days_ago)
    )


def test_purges_old_finished_messages_in_batches_and_keeps_the_rest(capsys) -> None:
    finished(25, QueueState.SUCCEEDED, 10)
    finished(5, QueueState.FAILED, 10)
    finished(7, QueueState.SUCCEEDED, 1)
    Message.objects.publish("test.echo", {})  # still queued
    call_command("purgequeue", "--older-than", "7d", "--batch-size", "10", "--pause", "0")
    assert "25 finished row(s) deleted" in capsys.readouterr().out
    assert Message.objects.count() == 5 + 7 + 1
    call_command("purgequeue", "--older-than", "7d", "--include-failed", "--pause", "0")
    assert Message.objects.count() == 7 + 1


def test_archive_moves_messages_out_of_the_hot_table() -> None:
    finished(12, QueueState.SUCCEEDED, 3)
    call_command(
        "purgequeue", "django_dbqueue.Message", "--older-than", "1d", "--archive", "--batch-size", "5"
    )
    assert not Message.objects.exists()
    assert ArchivedMessage.objects.count() == 12
    assert ArchivedMessage.objects.first().payload.keys() == {"i"}


def test_dry_run_counts_only(capsys) -> None:
    finished(4, QueueState.SUCCEEDED, 3)
    call_command("purgequeue", "--older-than", "1d", "--dry-run")
    assert "4 finished row(s) to purge" in capsys.readouterr().out
    assert Message.objects.count() == 4


def test_purges_old_attempt_history() -> None:
    now = timezone.now()
    QueueAttempt.objects.bulk_create(
        [
            QueueAttempt(
                model="x.Y",
                object_id=str(i),
                attempt=1,
                finished_at=now - timedelta(days=40 - i) + timedelta(hours=12),  # none on the boundary
                outcome="succeeded",
            )
            for i in range(20)
        ]
    )
    call_command("purgequeue", "--attempts-older-than", "30d", "--batch-size", "3", "--pause", "0")
    assert QueueAttempt.objects.count() == 10


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "Nothing to do"),
        (["testapp.Job", "--older-than", "1d"], "only deletes rows the queue owns"),
        (["--older-than", "soon"], "use a number"),
        (["--older-than", "1d", "--batch-size", "0"], "between 1 and 100000"),
        (["nope.Model", "--older-than", "1d"], "Unknown model"),
    ],
)
def test_bad_arguments(args, message) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("purgequeue", *args)


def test_purge_deletes_completed_batches_and_promoted_waits_only() -> None:
    long_ago, lately = timezone.now() - timedelta(days=40), timezone.now() - timedelta(days=1)
    old_done = Batch.objects.create(total=1, succeeded=1, complete_fired_at=long_ago)
    new_done = Batch.objects.create(total=1, succeeded=1, complete_fired_at=lately)
    running = Batch.objects.create(total=2, succeeded=1, created_at=long_ago)
    old_wait = JobWait.objects.create(model="testapp.Job", object_pk="1", promoted_at=long_ago)
    JobDependency.objects.create(wait=old_wait, parent_model="testapp.Job", parent_pk="2", settled=True)
    waiting = JobWait.objects.create(model="testapp.Job", object_pk="3", pending=1, created_at=long_ago)
    JobDependency.objects.create(wait=waiting, parent_model="testapp.Job", parent_pk="4")

    call_command("purgequeue", "--composition-older-than", "30d", "--pause", "0", verbosity=0)

    assert set(Batch.objects.values_list("pk", flat=True)) == {new_done.pk, running.pk} != {old_done.pk}
    assert list(JobWait.objects.values_list("pk", flat=True)) == [waiting.pk]
    assert list(JobDependency.objects.values_list("wait_id", flat=True)) == [waiting.pk]
