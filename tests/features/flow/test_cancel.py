"""Cancelling a RUNNING row (issue #22): the operator's request reaches the worker at its next
lease renewal, the handler gets JobCancelled, the row ends CANCELLED fenced by the claim."""

from __future__ import annotations

import signal
import time

import pytest

from django_dbqueue.exceptions import NotRunning
from django_dbqueue.models import CancelRequest, QueueAttempt
from django_dbqueue.states import QueueState
from tests.conftest import leases_run_out, skip_on_sqlite, wait_until
from tests.testapp.models import AtomicSlowJob, Ledger, SlowJob

pytestmark = pytest.mark.django_db(transaction=True)

#: Workers in these tests renew (and so read cancel requests) every LEASE / 3 seconds.
LEASE = 1.5
RENEWAL = LEASE / 3


def state(row) -> str:
    return type(row).objects.values_list("queue_state", flat=True).get(pk=row.pk)


def test_cancelling_a_row_that_is_not_running_is_refused_and_writes_nothing() -> None:
    ready = SlowJob.objects.create()
    with pytest.raises(NotRunning, match=r"is ready, not running.*cancel\(\)"):
        ready.request_cancel()
    SlowJob.objects.filter(pk=ready.pk).update(queue_state=QueueState.SUCCEEDED)
    with pytest.raises(NotRunning, match="is succeeded"):
        ready.request_cancel()
    assert SlowJob.objects.cancel_running() == 0
    assert not CancelRequest.objects.exists()
    assert state(ready) == QueueState.SUCCEEDED


def test_cancel_running_asks_only_for_running_rows_and_names_their_claim() -> None:
    rows = [SlowJob.objects.create() for _ in range(3)]
    claimed = SlowJob.objects.filter(pk__in=[rows[0].pk, rows[1].pk]).claim(2)
    assert SlowJob.objects.cancel_running(requested_by="ops") == 2
    asked = dict(CancelRequest.objects.values_list("object_id", "token"))
    assert asked == {str(row.pk): row.queue_claim().token for row in claimed}
    assert SlowJob.objects.cancel_running() == 2  # asked again: still one request per row
    assert CancelRequest.objects.count() == 2
    assert state(rows[2]) == QueueState.READY  # not running: left alone


def _started(model, worker) -> object:
    row = model.objects.create(seconds=60)
    after = model.objects.create(seconds=0, queue_priority=-1)  # runs once the slow one stops
    started = Ledger.objects.filter(job_id=row.pk)
    assert wait_until(lambda: started.exists() or worker.proc.poll() is not None, 60)
    assert state(row) == QueueState.RUNNING, worker.proc.poll()
    return row, after


@pytest.mark.processes
def test_a_cancelled_lease_mode_handler_stops_within_a_renewal_and_its_late_outcome_is_rejected(
    start_worker,
) -> None:
    worker = start_worker("testapp.SlowJob", "--lease", str(LEASE), "--batch-size", "1")
    row, after = _started(SlowJob, worker)
    asked = time.monotonic()
    row.request_cancel(requested_by="ops")
    assert wait_until(lambda: state(row) == QueueState.CANCELLED, 10)
    cancelled_in = time.monotonic() - asked
    print(f"CANCELLED {cancelled_in:.2f} s after the request")  # the docs quote it (pytest -s)
    # The handler stopped: the worker went on to the next row.
    assert wait_until(lambda: state(after) == QueueState.SUCCEEDED, 10)
    # A handler that swallows JobCancelled and returns: its success is rejected.
    stubborn = SlowJob.objects.create(seconds=60, swallow=True)
    assert wait_until(lambda: Ledger.objects.filter(job_id=stubborn.pk).exists(), 30)
    stubborn.request_cancel()
    assert wait_until(lambda: state(stubborn) == QueueState.CANCELLED, 10)
    time.sleep(RENEWAL + 0.5)
    worker.signal(signal.SIGTERM)
    assert worker.wait(60) == 0, worker.output
    assert cancelled_in < RENEWAL + 1.5, (cancelled_in, worker.output)
    row.refresh_from_db()
    assert row.queue_last_error == "cancelled while running, as ops asked"
    assert state(stubborn) == QueueState.CANCELLED
    assert f"late outcome rejected: testapp.SlowJob pk={stubborn.pk} succeeded" in worker.output
    # Lease mode undoes nothing the handler did: its ledger row stays.
    assert Ledger.objects.filter(job_id__in=[row.pk, stubborn.pk]).count() == 2
    assert not CancelRequest.objects.exists()
    assert QueueAttempt.objects.filter(object_id=str(row.pk), outcome="cancelled").count() == 1


@skip_on_sqlite  # SQLite has one writer: the operator's request waits for the atomic handler
@pytest.mark.processes
@pytest.mark.parametrize("swallow", [False, True], ids=["stops", "swallows"])
def test_a_cancelled_atomic_handler_stops_and_its_effects_are_rolled_back(start_worker, swallow) -> None:
    worker = start_worker("testapp.AtomicSlowJob", "--lease", str(LEASE), "--batch-size", "1")
    row = AtomicSlowJob.objects.create(seconds=60 if not swallow else 4, swallow=swallow)
    after = AtomicSlowJob.objects.create(seconds=0, queue_priority=-1)
    # The handler's ledger row is not committed yet: wait for the claim instead.
    assert wait_until(lambda: state(row) == QueueState.RUNNING, 60)
    time.sleep(0.3)
    asked = time.monotonic()
    row.request_cancel()
    assert wait_until(lambda: state(row) == QueueState.CANCELLED, 15)
    cancelled_in = time.monotonic() - asked
    print(f"CANCELLED {cancelled_in:.2f} s after the request")  # the docs quote it (pytest -s)
    assert wait_until(lambda: state(after) == QueueState.SUCCEEDED, 15)
    worker.signal(signal.SIGTERM)
    assert worker.wait(60) == 0, worker.output
    if not swallow:
        assert cancelled_in < RENEWAL + 1.5, (cancelled_in, worker.output)
    # Nothing the handler wrote committed; the next row's did.
    assert not Ledger.objects.filter(kind="AtomicSlowJob", job_id=row.pk).exists()
    assert Ledger.objects.filter(kind="AtomicSlowJob", job_id=after.pk).exists()
    assert not CancelRequest.objects.exists()


@pytest.mark.processes
@pytest.mark.parametrize(
    "model", [SlowJob, pytest.param(AtomicSlowJob, marks=skip_on_sqlite)], ids=["lease", "atomic"]
)
def test_a_cancelled_row_of_a_claim_that_has_not_started_never_starts(start_worker, model) -> None:
    first, second = model.objects.create(seconds=60), model.objects.create(seconds=60)
    third = model.objects.create(seconds=0, queue_priority=-1)
    worker = start_worker(model._meta.label, "--lease", str(LEASE), "--batch-size", "3")
    assert wait_until(lambda: state(third) == QueueState.RUNNING, 60)  # all three claimed together
    time.sleep(0.3)
    assert model.objects.filter(pk__in=[first.pk, second.pk]).cancel_running() == 2
    assert wait_until(lambda: state(third) == QueueState.SUCCEEDED, 15), worker.proc.poll()
    worker.signal(signal.SIGTERM)
    assert worker.wait(60) == 0, worker.output
    assert {state(first), state(second)} == {QueueState.CANCELLED}
    ran = set(Ledger.objects.filter(kind=model.__name__).values_list("job_id", flat=True))
    # The one that was running wrote its ledger row (kept in lease mode, rolled back in atomic
    # mode); the other never started.
    assert ran == ({first.pk, third.pk} if model is SlowJob else {third.pk}), worker.output


@pytest.mark.processes
def test_a_row_whose_worker_died_is_cancelled_by_the_rescue_not_retried(start_worker) -> None:
    first = start_worker("testapp.SlowJob", "--lease", "1", "--batch-size", "1")
    row = SlowJob.objects.create(seconds=60)
    assert wait_until(lambda: Ledger.objects.filter(job_id=row.pk).exists(), 60)
    first.kill_all()
    first.wait()
    row.request_cancel()
    assert wait_until(leases_run_out(SlowJob), timeout=30)
    second = start_worker("testapp.SlowJob", "--lease", "1", "--burst")
    assert second.wait(60) == 0, second.output
    row.refresh_from_db()
    assert row.queue_state == QueueState.CANCELLED, second.output
    assert "its worker was gone" in row.queue_last_error
    assert Ledger.objects.filter(job_id=row.pk).count() == 1  # not run again
    assert not CancelRequest.objects.exists()


# -- the admin -----------------------------------------------------------------------------------


def test_the_admin_action_asks_for_running_rows_and_leaves_the_others(admin_client) -> None:
    from django.urls import reverse

    from tests.testapp.models import Job

    running, ready = Job.objects.create(name="r"), Job.objects.create(name="w")
    [claimed] = Job.objects.filter(pk=running.pk).claim(1)
    url = reverse("admin:testapp_job_changelist")
    data = {
        "action": "dbqueue_cancel_running",
        "_selected_action": [str(running.pk), str(ready.pk)],
        "index": "0",
    }
    response = admin_client.post(url, data, follow=True)
    text = " ".join(str(m) for m in response.context["messages"])
    assert "Asked the worker of 1 running job to stop it" in text and "1 not running" in text
    request = CancelRequest.objects.get()
    assert (request.object_id, request.token, request.requested_by) == (
        str(running.pk),
        claimed.queue_claim().token,
        "admin",
    )
    assert state(ready) == QueueState.READY and state(running) == QueueState.RUNNING


def test_a_running_rows_page_has_a_cancel_button_that_asks_its_worker(admin_client) -> None:
    from django.urls import reverse

    from tests.testapp.models import Job

    row = Job.objects.create(name="r")
    page = reverse("admin:testapp_job_change", args=[row.pk])
    assert b"dbqueue-row-cancel_running" not in admin_client.get(page).content  # READY: plain Cancel
    Job.objects.filter(pk=row.pk).claim(1)
    assert b"dbqueue-row-cancel_running" in admin_client.get(page).content
    button = reverse("admin:testapp_job_dbqueue_row", args=[row.pk, "cancel_running"])
    response = admin_client.post(button, follow=True)
    assert "ends cancelled at its next lease renewal" in " ".join(
        str(m) for m in response.context["messages"]
    )
    assert CancelRequest.objects.filter(object_id=str(row.pk)).exists()
    Job.objects.filter(pk=row.pk).update(queue_state=QueueState.SUCCEEDED)
    CancelRequest.objects.all().delete()
    response = admin_client.post(button, follow=True)  # not running any more: nothing asked
    assert "was not changed" in " ".join(str(m) for m in response.context["messages"])
    assert not CancelRequest.objects.exists()
