"""Batches and chains under real ``runqueue`` processes (issue #23): callbacks fire exactly
once while workers are SIGKILLed between and during the last outcomes, and a chain runs its
join once, after its parents, on whichever workers take them."""

from __future__ import annotations

import os

import pytest
from django.db.models import Count

from django_dbqueue.composition import batch, message
from django_dbqueue.models import Message
from django_dbqueue.states import QueueState
from tests.conftest import leases_run_out, wait_until
from tests.testapp.models import AtomicJob, Job, Ledger

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

MODELS = ("testapp.Job", "testapp.AtomicJob", "django_dbqueue.Message")


def callbacks() -> dict:
    return {
        f"on_{kind}": message("test.batch_callback", {"kind": kind})
        for kind in ("success", "complete", "failure")
    }


def deliveries() -> dict[tuple[str, int], int]:
    rows = Ledger.objects.filter(kind__startswith="batch-").values("kind", "job_id").annotate(n=Count("id"))
    return {(row["kind"].removeprefix("batch-"), row["job_id"]): row["n"] for row in rows}


def drain_with_kills(start_worker, size: int, kills: int) -> None:
    """Four workers (two runqueues of two) drain the queues; ``kills`` times one runqueue and
    its workers are SIGKILLed mid-batch and another takes its place; a last one drains."""
    # Leases of 2 s: short, so that the killed workers' rows come back soon, but not so short that
    # a worker starved of CPU on a loaded 2-core machine (three test passes and Spark's JVMs) loses
    # its claims to the rescue again and again (one SQLite run did not drain in 120 s with 1 s).
    args = ("--concurrency", "2", "--batch-size", "20", "--lease", "2")
    running = [start_worker(*MODELS, *args), start_worker(*MODELS, *args)]
    for number in range(kills):
        goal = size * (number + 1) // (kills + 2)
        assert wait_until(lambda goal=goal: Ledger.objects.count() >= goal, timeout=120)
        victim = running.pop(0)
        victim.kill_all()
        victim.wait()
        running.append(start_worker(*MODELS, *args))
    for at, proc in enumerate(running):
        drained = wait_until(
            lambda: (
                not Message.objects.exclude(queue_state="succeeded").exists()
                and not any(
                    m.objects.filter(queue_state__in=("ready", "running")).exists() for m in (Job, AtomicJob)
                )
            ),
            timeout=max(180, size / 20),
        )
        if not drained:  # what was left, and what the workers said
            for other in running[at:]:  # the ones before were stopped already
                other.kill_all()
                other.wait()
            pytest.fail(f"not drained: {states()}\n" + "\n---\n".join(p.output[-3000:] for p in running))
        proc.kill_all()
        proc.wait()
    # The leases of the last killed claims run out: one burst finishes them.
    assert wait_until(lambda: all(leases_run_out(m)() for m in (Message, Job, AtomicJob)), timeout=30)
    last = start_worker(*MODELS, "--concurrency", "2", "--burst")
    assert last.wait(timeout=180) == 0, last.output


def states() -> dict[str, dict[str, int]]:
    """Each model's rows by queue state."""
    return {
        m.__name__: dict(
            m.objects.values_list("queue_state").annotate(n=Count("pk")).values_list("queue_state", "n")
        )
        for m in (Message, Job, AtomicJob)
    }


def run_batches(start_worker, size: int, kills: int) -> None:
    half = size // 2
    with batch(**callbacks(), description="all good") as good:
        Job.objects.bulk_enqueue([Job(name=f"g{i}") for i in range(half // 2)])
        AtomicJob.objects.bulk_enqueue([AtomicJob(name=f"g{i}") for i in range(half - half // 2)])
    with batch(**callbacks(), description="three fail") as bad:
        doomed = {1, half // 2, half - 2}  # one early, one midway, one among the last
        rows = [Job(name=f"b{i}", action="discard" if i in doomed else "ok") for i in range(half)]
        Job.objects.bulk_enqueue(rows)
    failing = Job.objects.filter(action="discard").count()
    assert failing == 3
    drain_with_kills(start_worker, size, kills)

    assert good.progress() == {
        "total": half,
        "succeeded": half,
        "failed": 0,
        "cancelled": 0,
        "pending": 0,
        "done": True,
    }
    assert bad.progress() | {"done": True} == {
        "total": half,
        "succeeded": half - 3,
        "failed": 3,
        "cancelled": 0,
        "pending": 0,
        "done": True,
    }
    # Each callback delivered once (its message ran once: the ledger row commits with it).
    assert deliveries() == {
        ("success", good.pk): 1,
        ("complete", good.pk): 1,
        ("failure", bad.pk): 1,
        ("complete", bad.pk): 1,
    }


def test_batch_callbacks_fire_exactly_once_under_four_workers_and_sigkills(start_worker) -> None:
    run_batches(start_worker, size=int(os.environ.get("DBQUEUE_BATCH_TEST_SIZE", "1200")), kills=2)


@pytest.mark.slow
@pytest.mark.databases(
    "mysql",
    reason="10,000 jobs through four SIGKILLs on MariaDB; on SQLite, whose one writer makes the workers "
    "take turns, the 1,200-job run above proves the same",
)
def test_batch_of_10000_jobs_fires_each_callback_once_through_sigkills(start_worker) -> None:
    run_batches(start_worker, size=10_000, kills=4)


@pytest.mark.parametrize("policy", ["cancel", "run"])
def test_chain_a_then_b_and_c_then_d_runs_d_once_after_both(start_worker, policy) -> None:
    a = Job.objects.create(name="A", queue_state=QueueState.IDLE)
    # B and C sleep as long: two workers finish them at about the same moment.
    b, c = Job(name="B", sleep=0.3), Job(name="C", sleep=0.3)
    b.enqueue(after=[a], on_parent_failure=policy)
    c.enqueue(after=[a], on_parent_failure=policy)
    d = Job(name="D")
    d.enqueue(after=[b, c], on_parent_failure=policy)
    failing = Job(name="B2", action="discard", sleep=0.3)  # a second diamond whose B fails for good
    e = Job.objects.create(name="E", queue_state=QueueState.IDLE)
    failing.enqueue(after=[e], on_parent_failure=policy)
    ok = Job(name="C2", sleep=0.3)
    ok.enqueue(after=[e], on_parent_failure=policy)
    join = Job(name="D2")
    join.enqueue(after=[failing, ok], on_parent_failure=policy)
    Job.objects.filter(pk__in=[a.pk, e.pk]).enqueue()
    worker = start_worker("testapp.Job", "--concurrency", "4", "--batch-size", "1", "--burst")
    assert worker.wait(timeout=120) == 0, worker.output

    runs = list(Ledger.objects.filter(kind="Job").order_by("id").values_list("job_id", flat=True))
    assert runs.count(d.pk) == 1 and runs.index(d.pk) > max(runs.index(b.pk), runs.index(c.pk))
    assert Job.objects.get(pk=d.pk).queue_state == QueueState.SUCCEEDED
    assert Job.objects.get(pk=failing.pk).queue_state == QueueState.FAILED
    joined = Job.objects.get(pk=join.pk)
    if policy == "cancel":
        assert joined.queue_state == QueueState.CANCELLED and join.pk not in runs
    else:
        assert joined.queue_state == QueueState.SUCCEEDED and runs.count(join.pk) == 1
        assert runs.index(join.pk) > max(runs.index(failing.pk), runs.index(ok.pk))
