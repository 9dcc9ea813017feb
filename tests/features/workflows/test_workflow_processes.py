"""Durable workflows under real ``runqueue`` processes (issue #36): a worker SIGKILLed in the
middle of a step re-runs that step only (atomic mode: every step's database effect exactly
once; lease mode: the interrupted step's at most twice, the others once); a durable sleep
wakes in a running worker; an event sent by another process (this one) wakes a parked row."""

from __future__ import annotations

import pytest
from django.db.models import Count

from django_dbqueue.workflows import send_event, steps_of
from tests.conftest import every_database, leases_run_out, wait_until
from tests.testapp.models import AtomicWorkflow, LeaseWorkflow, StepLedger

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.processes,
    every_database("crash and resume go through each database's locks, leases and rescue"),
]


def runs_of_steps(row) -> dict[int, int]:
    counted = StepLedger.objects.filter(kind=type(row).__name__, job_id=row.pk)
    return dict(counted.values("step").annotate(n=Count("id")).values_list("step", "n"))


def inside_step_three(row) -> bool:
    """The worker is in step 3: its checkpoints say 1 and 2 are done (atomic: step 3's own
    ledger row is not committed yet), or its ledger row is in (lease mode: committed)."""
    row.refresh_from_db()
    if type(row).queue_atomic:
        return row.queue_state == "running" and steps_of(row).count() == 2
    return runs_of_steps(row).get(3) == 1


@pytest.mark.parametrize("model", [AtomicWorkflow, LeaseWorkflow])
def test_a_worker_killed_mid_step_reruns_only_that_step(start_worker, model) -> None:
    label = f"testapp.{model.__name__}"
    # Step 3 works 60 s on the first attempt: the kill lands in it.
    row = model.objects.create(steps=5, slow_step=3, slow=60)
    victim = start_worker(label, "--lease", "1", "--poll-interval", "0.1")
    assert wait_until(lambda: inside_step_three(row), timeout=30)
    victim.kill_all()
    victim.wait()
    assert wait_until(leases_run_out(model), timeout=30)
    last = start_worker(label, "--burst")
    assert last.wait(timeout=60) == 0, last.output
    row.refresh_from_db()
    assert row.queue_state == "succeeded", row.queue_last_error
    if model.queue_atomic:
        # The killed run's step 3 rolled back with its transaction: each effect once.
        assert runs_of_steps(row) == {1: 1, 2: 1, 3: 1, 4: 1, 5: 1}
    else:
        # Its effect committed before the kill: at-least-once, for the interrupted step only.
        assert runs_of_steps(row) == {1: 1, 2: 1, 3: 2, 4: 1, 5: 1}
    assert not StepLedger.objects.filter(after_checkpoint=True).exists()  # no step ran past its checkpoint
    assert {step.name: step.result for step in steps_of(row)} == {
        "step-1": 1,
        "step-2": 3,
        "step-3": 6,
        "step-4": 10,
        "step-5": 15,
    }


@pytest.mark.parametrize("model", [AtomicWorkflow, LeaseWorkflow])
def test_sleep_and_event_wake_rows_in_a_running_worker(start_worker, model) -> None:
    label = f"testapp.{model.__name__}"
    sleeper = model.objects.create(steps=2, nap=1)
    waiter = model.objects.create(steps=2, event="paid")
    worker = start_worker(label, "--poll-interval", "0.1")
    try:
        assert wait_until(lambda: model.objects.get(pk=sleeper.pk).queue_state == "succeeded", timeout=30)
        # Parked for the event: step 1 done, the row READY and held by nobody.
        assert wait_until(lambda: runs_of_steps(waiter) == {1: 1}, timeout=30)
        assert wait_until(lambda: model.objects.get(pk=waiter.pk).queue_state == "ready", timeout=30)
        send_event(model.objects.get(pk=waiter.pk), "paid", {"by": "test"})
        assert wait_until(lambda: model.objects.get(pk=waiter.pk).queue_state == "succeeded", timeout=30)
    finally:
        worker.kill_all()
        worker.wait()
    waiter.refresh_from_db()
    assert waiter.got == {"by": "test"}
    assert runs_of_steps(waiter) == {1: 1, 2: 1}
    assert runs_of_steps(sleeper) == {1: 1, 2: 1}


def test_many_workflows_under_four_workers_and_sigkills_run_each_step_once(start_worker) -> None:
    """60 atomic workflows of 5 steps, four workers (two runqueues of two), a runqueue and its
    workers SIGKILLed twice while they run (a third and two thirds of the steps done): every
    workflow ends, every step's database effect committed exactly once."""
    size, steps = 60, 5
    AtomicWorkflow.objects.bulk_create([AtomicWorkflow(steps=steps, slow_step=0) for _ in range(size)])
    label = "testapp.AtomicWorkflow"
    args = ("--concurrency", "2", "--lease", "1", "--poll-interval", "0.1")
    running = [start_worker(label, *args), start_worker(label, *args)]
    for kill in (1, 2):
        goal = size * steps * kill // 3
        assert wait_until(lambda goal=goal: StepLedger.objects.count() >= goal, timeout=60)
        victim = running.pop(0)
        victim.kill_all()
        victim.wait()
        running.append(start_worker(label, *args))
    assert wait_until(
        lambda: AtomicWorkflow.objects.filter(queue_state="succeeded").count() == size, timeout=90
    ), list(AtomicWorkflow.objects.exclude(queue_state="succeeded").values_list("pk", "queue_state"))
    for proc in running:
        proc.kill_all()
        proc.wait()
    per_step = StepLedger.objects.values("job_id", "step").annotate(n=Count("id"))
    assert {row["n"] for row in per_step} == {1}
    assert not StepLedger.objects.filter(after_checkpoint=True).exists()
    assert per_step.count() == size * steps
