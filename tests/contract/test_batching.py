"""Claim sizes that follow how long jobs take (batching.py)."""

from __future__ import annotations

import pytest

from django_dbqueue import signals
from django_dbqueue.worker import Worker
from django_dbqueue.worker.sizing import ClaimSizer
from tests.testapp.models import AtomicJob, GroupedAtomicJob, Job


def test_the_default_holds_until_a_batch_was_measured() -> None:
    sizer = ClaimSizer()
    assert sizer.size(Job, default=10) == 10
    sizer.observe(Job, jobs=0, seconds=1.0)  # nothing measured
    assert sizer.size(Job, default=10) == 10


def test_fast_jobs_get_the_largest_batch_and_slow_ones_the_smallest(settings) -> None:
    settings.DBQUEUE_BATCH_SIZE = 100
    settings.DBQUEUE_BATCH_SECONDS = 0.1
    sizer = ClaimSizer()
    sizer.observe(Job, jobs=100, seconds=0.05)  # 0.5 ms a job: 200 fit, 100 allowed
    assert sizer.size(Job, default=10) == 100
    sizer.observe(AtomicJob, jobs=10, seconds=0.1)  # 10 ms a job: 10 fit
    assert sizer.size(AtomicJob, default=10) == 10
    sizer.observe(GroupedAtomicJob, jobs=10, seconds=20.0)  # 2 s a job: one, but a group is 10
    assert sizer.size(GroupedAtomicJob, default=10, minimum=10) == 10
    assert sizer.size(GroupedAtomicJob, default=10) == 1


def test_the_average_moves_towards_new_batches_without_jumping(settings) -> None:
    settings.DBQUEUE_BATCH_SECONDS = 1.0
    sizer = ClaimSizer()
    sizer.observe(Job, jobs=10, seconds=0.1)  # 10 ms a job
    sizer.observe(Job, jobs=1, seconds=1.0)  # one slow job: 1 s
    # 10 ms + 0.3 x (1 s - 10 ms) = 307 ms a job: 3 rows per second of work.
    assert sizer.size(Job, default=10) == 3


def drain_claim_sizes(model) -> tuple[int, list[int]]:
    """Drain ``model`` with a default Worker: the jobs that succeeded, and each claim's size."""
    sizes: list[int] = []

    def claimed(sender, rows, **kwargs) -> None:
        sizes.append(len(rows))

    signals.job_claimed.connect(claimed, sender=model)
    try:
        stats = Worker(models=[model], burst=True, handle_signals=False).run()
    finally:
        signals.job_claimed.disconnect(claimed, sender=model)
    return stats.succeeded, sizes


@pytest.mark.django_db(transaction=True)
def test_a_worker_claims_more_fast_atomic_jobs_after_its_first_batch(settings) -> None:
    settings.DBQUEUE_BATCH_SECONDS = 60.0  # any job measured here fits many times over
    settings.DBQUEUE_BATCH_SIZE = 40
    AtomicJob.objects.bulk_create([AtomicJob(name=str(i)) for i in range(120)])
    succeeded, sizes = drain_claim_sizes(AtomicJob)
    assert succeeded == 120
    assert sizes[:4] == [10, 40, 40, 30]


@pytest.mark.django_db(transaction=True)
def test_a_worker_claims_slow_jobs_one_at_a_time_after_its_first_batch(settings) -> None:
    settings.DBQUEUE_BATCH_SECONDS = 0.01  # less than one job's 50 ms
    settings.DBQUEUE_BATCH_SIZE = 4
    Job.objects.bulk_create([Job(name=str(i), sleep=0.05) for i in range(7)])
    succeeded, sizes = drain_claim_sizes(Job)
    assert succeeded == 7
    assert sizes == [4, 1, 1, 1]  # the default until a batch was timed, then one at a time


def test_an_explicit_batch_size_is_kept() -> None:
    worker = Worker(models=[Job], batch_size=7, handle_signals=False)
    worker._sizer.observe(Job, jobs=1, seconds=100.0)
    assert worker._claim_size(Job) == 7
