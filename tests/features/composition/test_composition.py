"""Batches and chains (issue #23) in one process: counters, callbacks, promotion, policies, and
bad input that writes nothing. The races and crashes are in test_composition_processes.py."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_dbqueue.composition import batch, message
from django_dbqueue.exceptions import DependencyCycle, InvalidCallback, InvalidDependency
from django_dbqueue.models import Batch, JobDependency, JobWait, Message
from django_dbqueue.states import QueueState
from django_dbqueue.testing import run_queue_until_empty
from tests.testapp.models import AtomicJob, Job, Ledger

pytestmark = pytest.mark.django_db(transaction=True)

CALLBACKS = {
    "on_success": message("test.batch_callback", {"x": 1}),
    "on_complete": message("test.batch_callback", {"x": 2}),
    "on_failure": message("test.batch_callback", {"x": 3}),
}


def fired() -> dict[str, int]:
    """Callback deliveries so far, by kind (after the callback messages ran)."""
    run_queue_until_empty(Message)
    kinds = Ledger.objects.filter(kind__startswith="batch-").values_list("kind", flat=True)
    return {kind.removeprefix("batch-"): list(kinds).count(kind) for kind in set(kinds)}


def state(row) -> str:
    row.refresh_from_db()
    return row.queue_state


def test_batch_of_rows_messages_fires_success_and_complete_once() -> None:
    with batch(**CALLBACKS, description="import") as b:
        Job.objects.bulk_enqueue([Job(name=str(i)) for i in range(30)])
        AtomicJob.objects.create(name="one by one")
        Message.objects.publish("test.echo", {"n": 1})
    assert b.progress() == {
        "total": 32,
        "succeeded": 0,
        "failed": 0,
        "cancelled": 0,
        "pending": 32,
        "done": False,
    }
    assert sorted(Batch.objects.get().member_models) == [
        "django_dbqueue.message",
        "testapp.atomicjob",
        "testapp.job",
    ]
    run_queue_until_empty(Job, AtomicJob)
    assert b.progress()["succeeded"] == 31 and not b.progress()["done"]
    assert not Message.objects.filter(kind="test.batch_callback").exists()  # one member is left
    assert fired() == {"success": 1, "complete": 1}  # it ran, then the callbacks
    assert b.progress()["done"]
    b.refresh_from_db()
    assert b.success_fired_at and b.complete_fired_at and b.failure_fired_at is None


def test_a_member_failing_for_good_fires_failure_once_and_complete_without_success() -> None:
    with batch(**CALLBACKS) as b:
        Job.objects.bulk_enqueue(
            [Job(name="ok"), Job(action="discard"), Job(action="discard"), Job(name="ok")]
        )
    run_queue_until_empty(Job)
    assert b.progress() | {"done": None} == {
        "total": 4,
        "succeeded": 2,
        "failed": 2,
        "cancelled": 0,
        "pending": 0,
        "done": None,
    }
    assert fired() == {"failure": 1, "complete": 1}


def test_an_empty_batch_completes_at_once() -> None:
    with batch(**CALLBACKS) as b:
        pass
    assert b.total == 0 and b.progress()["done"]
    assert fired() == {"success": 1, "complete": 1}


def test_cancel_ends_the_members_not_started_and_completes_the_batch() -> None:
    with batch(**CALLBACKS) as b:
        Job.objects.bulk_enqueue([Job(name=str(i)) for i in range(5)])
    assert b.cancel() == 5
    assert Job.objects.filter(queue_state=QueueState.CANCELLED).count() == 5
    assert b.progress()["cancelled"] == 5
    assert fired() == {"complete": 1}


def test_a_task_and_a_row_as_callbacks() -> None:
    pytest.importorskip("django.tasks")
    from tests.testapp.tasks import batch_done

    follow_up = Job(name="after the batch")
    with batch(on_complete=follow_up, on_success=batch_done) as b:
        Job.objects.bulk_enqueue([Job(name="a")])
    assert state(follow_up) == QueueState.IDLE and follow_up.queue_batch is None
    run_queue_until_empty(Job)
    assert state(follow_up) == QueueState.SUCCEEDED  # promoted by the batch, then ran
    from django_dbqueue.models import TaskRecord

    task = TaskRecord.objects.get()
    assert task.kwargs["batch_id"] == b.pk and task.kwargs["callback"] == "success"


def test_jobs_in_no_composition_cost_no_statement_more() -> None:
    Job.objects.bulk_enqueue([Job(name=str(i)) for i in range(20)])
    with CaptureQueriesContext(connection) as queries:
        run_queue_until_empty(Job)
    assert not [
        q for q in queries.captured_queries if "dbqueue_batch" in q["sql"] or "jobdependency" in q["sql"]
    ]


def test_lease_mode_successes_of_one_batch_cost_one_counter_update() -> None:
    with batch() as b:
        Job.objects.bulk_enqueue([Job(name=str(i)) for i in range(50)])
    with CaptureQueriesContext(connection) as queries:
        run_queue_until_empty(Job)
    updates = [
        q for q in queries.captured_queries if q["sql"].startswith("UPDATE") and "dbqueue_batch" in q["sql"]
    ]
    assert b.progress()["succeeded"] == 50
    claims = len(
        [q for q in queries.captured_queries if "queue_state" in q["sql"] and "FOR UPDATE" in q["sql"]]
    )
    assert len(updates) <= max(claims, 1) + 2, [q["sql"] for q in updates]  # + the fired_at stamps


# -- chains --------------------------------------------------------------------------------------


def diamond(policy: str, b_action: str = "ok"):
    a = Job.objects.create(name="A")
    b, c = Job(name="B", action=b_action), Job(name="C")
    assert b.enqueue(after=[a], on_parent_failure=policy) is False
    assert c.enqueue(after=[a]) is False
    d = Job(name="D")
    d.enqueue(after=[b, c], on_parent_failure=policy)
    return a, b, c, d


def test_chain_runs_d_once_after_b_and_c() -> None:
    a, b, c, d = diamond("cancel")
    assert [state(r) for r in (a, b, c, d)] == ["ready", "idle", "idle", "idle"]
    run_queue_until_empty(Job)
    assert [state(r) for r in (a, b, c, d)] == ["succeeded"] * 4
    order = list(Ledger.objects.filter(kind="Job").order_by("id").values_list("job_id", flat=True))
    assert order.index(d.pk) == 3 and order[0] == a.pk and order.count(d.pk) == 1
    assert JobWait.objects.get(object_pk=str(d.pk)).pending == 0


@pytest.mark.parametrize("policy", ["cancel", "run"])
def test_a_parent_failing_for_good_applies_the_policy(policy) -> None:
    _a, b, _c, d = diamond(policy, b_action="discard")
    run_queue_until_empty(Job)
    assert state(b) == QueueState.FAILED
    if policy == "cancel":
        assert state(d) == QueueState.CANCELLED
        assert "failed or was cancelled" in d.queue_last_error
    else:
        assert state(d) == QueueState.SUCCEEDED


def waiting_chain() -> tuple[Job, Job, Job]:
    """A (idle) -> B -> C: B and C wait."""
    a = Job.objects.create(name="A", queue_state=QueueState.IDLE)
    b = Job(name="B")
    b.enqueue(after=[a])
    c = Job(name="C")
    c.enqueue(after=[b])
    return a, b, c


def test_cancelling_a_parent_cascades_to_its_waiting_dependants() -> None:
    a, b, c = waiting_chain()
    assert Job.objects.filter(pk=a.pk).cancel() == 1
    assert [state(r) for r in (b, c)] == [QueueState.CANCELLED, QueueState.CANCELLED]


def test_parents_that_succeeded_already_make_the_dependant_ready_at_once() -> None:
    a = Job.objects.create(name="A")
    run_queue_until_empty(Job)
    b = Job(name="B")
    assert b.enqueue(after=[a]) is True
    assert state(b) == QueueState.READY


def test_a_chain_inside_a_batch_counts_the_dependant() -> None:
    with batch(**CALLBACKS) as bt:
        a = Job.objects.create(name="A")
        Job(name="B").enqueue(after=[a])
    assert bt.total == 2
    run_queue_until_empty(Job)
    assert bt.progress()["succeeded"] == 2
    assert fired() == {"success": 1, "complete": 1}


# -- bad input: a clear error, nothing written ---------------------------------------------------


def nothing_written() -> bool:
    return not (JobWait.objects.exists() or JobDependency.objects.exists() or Batch.objects.exists())


def test_a_dependency_on_a_row_that_does_not_exist_is_refused() -> None:
    ghost = Job(name="ghost", pk=987654)
    with pytest.raises(InvalidDependency, match="does not exist"):
        Job(name="B").enqueue(after=[ghost])
    assert nothing_written() and not Job.objects.exists()


def test_an_unsaved_parent_a_bad_policy_and_no_parents_are_refused() -> None:
    a = Job.objects.create(name="A")
    with pytest.raises(InvalidDependency, match="not saved"):
        Job(name="B").enqueue(after=[Job(name="unsaved")])
    with pytest.raises(InvalidDependency, match="on_parent_failure"):
        Job(name="B").enqueue(after=[a], on_parent_failure="maybe")
    with pytest.raises(InvalidDependency, match="at least one"):
        Job(name="B").enqueue(after=[])
    assert nothing_written() and Job.objects.count() == 1


def test_a_cycle_is_refused() -> None:
    a, _, c = waiting_chain()
    with pytest.raises(DependencyCycle):
        a.enqueue(after=[c])
    with pytest.raises(DependencyCycle):
        a.enqueue(after=[a])
    assert JobWait.objects.count() == 2 and JobDependency.objects.count() == 2
    assert state(a) == QueueState.IDLE


@pytest.mark.parametrize("callback", ["test.echo", 42, {"message": "x"}, Job])
def test_a_callback_that_is_not_a_job_is_refused(callback) -> None:
    with pytest.raises(InvalidCallback):
        with batch(on_success=callback):
            Job.objects.create(name="member")
    assert nothing_written() and not Job.objects.exists()


def test_a_running_parent_is_refused() -> None:
    a = Job.objects.create(name="A")
    Job.objects.claim()
    with pytest.raises(InvalidDependency, match="running"):
        Job(name="B").enqueue(after=[a])
    assert nothing_written()


# -- admin -----------------------------------------------------------------------------------------


def test_the_batch_admin_shows_progress_and_cancels(admin_client) -> None:
    from django.urls import reverse

    with batch(description="nightly import") as b:
        Job.objects.bulk_enqueue([Job(name=str(i)) for i in range(4)])
    run_queue_until_empty(Job, max_jobs=1)
    listing = admin_client.get(reverse("admin:django_dbqueue_batch_changelist"))
    assert listing.status_code == 200
    assert "nightly import" in listing.text and "1 / 4 finished" in listing.text
    page = admin_client.get(reverse("admin:django_dbqueue_batch_change", args=[b.pk]))
    assert page.status_code == 200 and "1 / 4 finished" in page.text
    response = admin_client.post(
        reverse("admin:django_dbqueue_batch_changelist"),
        {"action": "cancel_batches", "_selected_action": [b.pk]},
        follow=True,
    )
    assert "3 jobs cancelled." in response.text
    assert b.progress()["cancelled"] == 3 and b.progress()["done"]


def test_a_rows_admin_page_shows_its_batch_parents_and_dependants(admin_client) -> None:
    from django.urls import reverse

    with batch() as b:
        a = Job.objects.create(name="A")
    child = Job(name="B")
    child.enqueue(after=[a])
    parent_page = admin_client.get(reverse("admin:testapp_job_change", args=[a.pk])).text
    assert f"batch {b.pk}" in parent_page
    assert reverse("admin:testapp_job_change", args=[child.pk]) in parent_page  # a dependant
    child_page = admin_client.get(reverse("admin:testapp_job_change", args=[child.pk])).text
    assert f"testapp.job {a.pk}" in child_page  # runs after A


def test_requeueing_leaves_a_finished_members_batch_and_keeps_a_waiting_ones() -> None:
    with batch() as b:
        done, waiting = Job.objects.create(name="done"), Job.objects.create(name="waits")
    Job.objects.filter(pk=waiting.pk).update(queue_state=QueueState.IDLE)
    run_queue_until_empty(Job)
    assert Job.objects.filter(pk__in=[done.pk, waiting.pk]).enqueue() == 2
    done.refresh_from_db()
    waiting.refresh_from_db()
    assert done.queue_batch is None and waiting.queue_batch == b.pk


def test_a_message_published_after_a_row_waits_for_it() -> None:
    a = Job.objects.create(name="A")
    published = Message.objects.publish("test.echo", {"n": 2}, after=[a])
    assert state(published.message) == QueueState.IDLE
    run_queue_until_empty(Job)
    assert state(published.message) == QueueState.READY
    run_queue_until_empty(Message)
    assert state(published.message) == QueueState.SUCCEEDED


def test_a_member_the_rescue_ends_failed_is_counted_and_fires_failure() -> None:
    from datetime import timedelta

    from django.utils import timezone

    with batch(**CALLBACKS) as b:
        Job.objects.create(name="dies on its last attempt")
    Job.objects.claim()
    Job.objects.update(queue_attempts=3, queue_locked_until=timezone.now() - timedelta(seconds=5))
    assert Job.objects.rescue_expired() == 1
    assert Job.objects.get().queue_state == QueueState.FAILED
    assert b.progress()["failed"] == 1
    assert fired() == {"failure": 1, "complete": 1}
