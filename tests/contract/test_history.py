"""QueueAttempt history: one row per attempt, written with the outcome."""

from __future__ import annotations

import time

import pytest
from django.db.models import Count
from django.utils import timezone

from django_dbqueue.models import QueueAttempt
from django_dbqueue.queue.outcome import Outcome
from django_dbqueue.queue.record import record
from django_dbqueue.states import QueueState
from django_dbqueue.worker import Worker
from tests.conftest import leases_run_out, wait_until
from tests.testapp.models import AtomicJob, Job, Ledger

pytestmark = pytest.mark.django_db(transaction=True)


def assert_history_matches(model) -> None:
    """Every attempt a row made is recorded exactly once, and the last one says how it ended."""
    final = {"succeeded": "succeeded", "failed": {"failed", "lost"}}
    for row in model.objects.all():
        attempts = list(
            QueueAttempt.objects.filter(model=model._meta.label, object_id=str(row.pk)).order_by("attempt")
        )
        assert [a.attempt for a in attempts] == list(range(1, row.queue_attempts + 1)), row.pk
        last = attempts[-1].outcome
        expected = final[row.queue_state]
        assert last in expected if isinstance(expected, set) else last == expected, (row.pk, last)
        for a in attempts[:-1]:
            assert a.outcome in ("retried", "lost")
        assert all(a.claimed_at and a.finished_at >= a.claimed_at for a in attempts)


def test_each_outcome_writes_one_attempt_row() -> None:
    Job.objects.bulk_create([Job(name="ok"), Job(name="flaky", fail_times=1), Job(name="dead", fail_times=9)])
    for _ in range(30):
        Worker(models=[Job], burst=True, handle_signals=False).run()
        if not Job.objects.filter(queue_state="ready").exists():
            break
        time.sleep(0.1)
    assert_history_matches(Job)
    flaky = Job.objects.get(name="flaky")
    retried = QueueAttempt.objects.get(object_id=str(flaky.pk), attempt=1)
    assert retried.outcome == "retried" and "planned failure on attempt 1" in retried.error
    assert retried.worker_id and retried.due_at and retried.enqueued_at


def test_rescue_records_lost_attempts() -> None:
    Job.objects.create(name="x")
    [row] = Job.objects.claim(lease=60)
    Job.objects.filter(pk=row.pk).update(queue_locked_until=timezone.now() - timezone.timedelta(seconds=1))
    assert Job.objects.rescue_expired() == 1
    attempt = QueueAttempt.objects.get()
    assert (attempt.outcome, attempt.attempt, attempt.worker_id) == ("lost", 1, row.queue_locked_by)


def test_history_can_be_turned_off(settings) -> None:
    settings.DBQUEUE_HISTORY = False
    Job.objects.create(name="x")
    Worker(models=[Job], burst=True, handle_signals=False).run()
    assert not QueueAttempt.objects.exists()


@pytest.mark.processes
@pytest.mark.parametrize("model", [Job, AtomicJob], ids=["lease", "atomic"])
def test_history_matches_outcomes_after_a_four_worker_drain_with_kills(start_worker, model) -> None:
    model.objects.bulk_create(
        [model(name=str(i), sleep=0.01, fail_times=1 if i % 10 == 0 else 0) for i in range(400)]
    )
    for _ in range(2):  # two rounds of SIGKILL mid-drain
        worker = start_worker(model._meta.label, "--concurrency", "4", "--batch-size", "20", "--lease", "2")
        target = Ledger.objects.count() + 60
        assert wait_until(lambda target=target: Ledger.objects.count() >= target, timeout=60)
        worker.kill_all()
        worker.wait()
    assert wait_until(leases_run_out(model), timeout=30)  # the killed workers' leases
    final = start_worker(model._meta.label, "--concurrency", "4", "--batch-size", "20", "--burst")
    assert final.wait(timeout=180) == 0, final.output
    deadline = time.monotonic() + 30
    while model.objects.filter(queue_state="ready").exists() and time.monotonic() < deadline:
        time.sleep(0.3)  # a few retries wait out their backoff
        start_worker(model._meta.label, "--burst").wait(timeout=60)
    counts = dict(model.objects.values_list("queue_state").annotate(n=Count("pk")))
    # Nothing is left behind. On a starved machine a live worker can miss renewals and lose
    # rows to the rescue too; a row that loses its last allowed attempt that way ends FAILED
    # with that reason, never silently.
    assert set(counts) <= {QueueState.SUCCEEDED, QueueState.FAILED}, counts
    assert sum(counts.values()) == 400
    for error in model.objects.filter(queue_state=QueueState.FAILED).values_list(
        "queue_last_error", flat=True
    ):
        assert "lease expired on the last allowed attempt" in error
    assert "rescued" in final.output  # the killed workers' rows came back through the rescue
    assert_history_matches(model)


def test_success_attempts_copied_by_the_database_match_the_rows() -> None:
    """Successes are recorded by one INSERT … SELECT from the rows just finished: the attempt
    must carry exactly what the row says (and nothing for rows another batch finished)."""
    Job.objects.bulk_create([Job(name=f"ok{i}") for i in range(7)])
    worker = Worker(models=[Job], burst=True, handle_signals=False, batch_size=5)
    assert worker.run().succeeded == 7
    for row in Job.objects.all():
        (attempt,) = QueueAttempt.objects.filter(model=Job._meta.label, object_id=str(row.pk))
        assert attempt.outcome == "succeeded" and attempt.error == ""
        assert attempt.attempt == row.queue_attempts == 1
        assert attempt.worker_id == worker.worker_id
        assert (attempt.enqueued_at, attempt.due_at, attempt.claimed_at, attempt.finished_at) == (
            row.queue_enqueued_at,
            row.queue_run_at,
            row.queue_last_attempt_at,
            row.queue_finished_at,
        )


@pytest.mark.parametrize("history", [True, False])
def test_a_batch_with_a_lost_row_records_the_others_and_their_history_only(history, settings) -> None:
    """The success write of a batch where one row's claim was lost meanwhile (a rescuer took
    it): the others are written with one attempt each, the lost one is left alone."""
    settings.DBQUEUE_HISTORY = history
    Job.objects.bulk_create([Job(name=str(i)) for i in range(4)])
    rows = Job.objects.claim(limit=4, worker_id="w1")
    stolen = rows[1]
    Job.objects.filter(pk=stolen.pk).update(queue_token=12345, queue_locked_by="rescuer")
    recorded = record(Job, rows[0].queue_claim(), [Outcome.succeeded(row) for row in rows])
    assert [outcome.pk for outcome in recorded.rejected] == [stolen.pk]
    states = dict(Job.objects.values_list("pk", "queue_state"))
    assert states.pop(stolen.pk) == "running" and set(states.values()) == {"succeeded"}
    copied = sorted(int(pk) for pk in QueueAttempt.objects.values_list("object_id", flat=True))
    assert copied == (sorted(states) if history else [])
