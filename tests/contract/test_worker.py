"""The Worker class in-process: outcomes, retries, atomic mode, timeouts, shutdown."""

from __future__ import annotations

import threading
import time

import pytest
from django.db.models import Count

from django_dbqueue import signals
from django_dbqueue.states import QueueState
from django_dbqueue.worker import Worker
from tests.conftest import ledger_runs as runs
from tests.conftest import wait_until
from tests.testapp.models import AtomicJob, GroupedAtomicJob, Job, Ledger, OptimisticGroupJob, TimeoutJob

pytestmark = pytest.mark.django_db(transaction=True)


def drain(*models, **kwargs):
    return Worker(models=list(models), burst=True, handle_signals=False, **kwargs).run()


def drain_until_settled(model, rounds: int = 40):
    """Drain repeatedly, letting retry backoffs (50 ms doubling) come due."""
    for _ in range(rounds):
        drain(model)
        if not model.objects.filter(queue_state__in=["ready", "running"]).exists():
            return
        time.sleep(0.1)
    raise AssertionError("queue did not settle")


def test_burst_drains_everything_once() -> None:
    Job.objects.bulk_create([Job(name=str(i)) for i in range(250)])
    stats = drain(Job, batch_size=40)
    assert stats.succeeded == 250 and stats.claimed == 250
    assert Job.objects.filter(queue_state=QueueState.SUCCEEDED).count() == 250
    assert set(runs(Job).values()) == {1}


def test_failures_retry_with_backoff_keep_the_error_and_end_failed() -> None:
    flaky = Job.objects.create(name="flaky", fail_times=1)
    doomed = Job.objects.create(name="doomed", fail_times=99)
    discarded = Job.objects.create(name="discard", action="discard")
    drain_until_settled(Job)
    flaky.refresh_from_db()
    doomed.refresh_from_db()
    discarded.refresh_from_db()
    assert (flaky.queue_state, flaky.queue_attempts) == (QueueState.SUCCEEDED, 2)
    assert (doomed.queue_state, doomed.queue_attempts) == (QueueState.FAILED, 3)
    assert "planned failure on attempt 3" in doomed.queue_last_error
    assert "Traceback (most recent call last)" in doomed.queue_last_error
    assert (discarded.queue_state, discarded.queue_attempts) == (QueueState.FAILED, 1)
    assert "not worth retrying" in discarded.queue_last_error


def test_signals_fire_for_claims_successes_and_failures() -> None:
    seen: list[tuple[str, object]] = []

    def on_claimed(sender, rows, worker_id, **kw):
        seen.append(("claimed", len(rows)))

    def on_ok(sender, row, **kw):
        seen.append(("ok", row.pk))

    def on_failed(sender, row, error, retry_at, **kw):
        seen.append(("failed", retry_at is None))

    signals.job_claimed.connect(on_claimed)
    signals.job_succeeded.connect(on_ok)
    signals.job_failed.connect(on_failed)
    try:
        ok = Job.objects.create(name="ok")
        Job.objects.create(name="bad", action="discard")
        drain(Job)
    finally:
        signals.job_claimed.disconnect(on_claimed)
        signals.job_succeeded.disconnect(on_ok)
        signals.job_failed.disconnect(on_failed)
    assert ("claimed", 2) in seen and ("ok", ok.pk) in seen and ("failed", True) in seen


def test_atomic_mode_rolls_back_a_failed_handlers_writes() -> None:
    AtomicJob.objects.create(name="ok")
    bad = AtomicJob.objects.create(name="bad", fail_times=99)
    drain_until_settled(AtomicJob)
    # The failing handler wrote a ledger row on each of its 3 attempts; all rolled back.
    assert bad.pk not in runs(AtomicJob)
    assert list(runs(AtomicJob).values()) == [1]
    assert AtomicJob.objects.get(pk=bad.pk).queue_state == QueueState.FAILED


@pytest.mark.parametrize("model", [GroupedAtomicJob, OptimisticGroupJob], ids=["savepoints", "optimistic"])
def test_grouped_atomic_mode_isolates_each_failing_handler(model) -> None:
    model.objects.bulk_create([model(name=str(i), fail_times=99 if i % 7 == 0 else 0) for i in range(35)])
    drain_until_settled(model)
    states = dict(model.objects.values("queue_state").annotate(n=Count("id")).values_list("queue_state", "n"))
    assert states == {"succeeded": 30, "failed": 5}
    ran = runs(model)
    assert len(ran) == 30 and set(ran.values()) == {1}


def test_timeout_stops_a_slow_handler_and_counts_as_a_failed_attempt() -> None:
    job = TimeoutJob.objects.create(name="slow", sleep=5)
    started = time.monotonic()
    drain(TimeoutJob, max_jobs=1)  # one attempt: the 50 ms retry may come due meanwhile
    assert time.monotonic() - started < 3
    job.refresh_from_db()
    assert job.queue_state == QueueState.READY and job.queue_attempts == 1
    assert "JobTimeout: timed out after 0.5 s" in job.queue_last_error


def test_handler_raising_system_exit_is_recorded_and_stops_the_worker() -> None:
    Job.objects.bulk_create([Job(name="exit", action="exit")] + [Job(name=str(i)) for i in range(5)])
    worker = Worker(models=[Job], burst=True, handle_signals=False)
    stats = worker.run()
    assert isinstance(worker.fatal, SystemExit)
    exited = Job.objects.get(name="exit")
    # Not an Exception, so outside the retry policy's retry_on: it ends FAILED, reason kept.
    assert exited.queue_state == QueueState.FAILED and "SystemExit: 3" in exited.queue_last_error
    # The rest of its batch was handed back, not lost.
    assert stats.released == 5
    assert Job.objects.filter(queue_state=QueueState.READY, queue_attempts=0).count() == 5


def test_stop_finishes_the_current_job_and_releases_the_rest() -> None:
    Job.objects.bulk_create([Job(name=str(i), sleep=0.3) for i in range(10)])
    worker = Worker(models=[Job], batch_size=10, handle_signals=False, poll_interval=0.05)
    thread = threading.Thread(target=worker.run)
    thread.start()
    assert wait_until(lambda: Ledger.objects.count() >= 1, timeout=10)
    worker.stop()
    thread.join(timeout=10)
    assert not thread.is_alive()
    counts = dict(Job.objects.values("queue_state").annotate(n=Count("id")).values_list("queue_state", "n"))
    assert counts.get("running", 0) == 0
    assert counts["succeeded"] == worker.stats.succeeded >= 1
    assert counts["ready"] == worker.stats.released == 10 - worker.stats.succeeded
    assert Job.objects.filter(queue_state="ready").exclude(queue_attempts=0).count() == 0


def test_max_jobs_bounds_the_work() -> None:
    Job.objects.bulk_create([Job(name=str(i)) for i in range(30)])
    stats = Worker(models=[Job], max_jobs=12, batch_size=5, handle_signals=False).run()
    assert stats.succeeded == 12
    assert Job.objects.filter(queue_state=QueueState.SUCCEEDED).count() == 12


def test_lease_is_renewed_while_a_long_batch_runs() -> None:
    Job.objects.bulk_create([Job(name=str(i), sleep=0.4) for i in range(6)])
    # Lease 1 s, batch takes ~2.4 s: without renewal the tail of the batch would expire.
    stats = drain(Job, lease=1, batch_size=6)
    assert stats.succeeded == 6 and stats.lost == 0
    assert Job.objects.rescue_expired() == 0


def test_worker_refuses_a_missing_table() -> None:
    from django.core.exceptions import ImproperlyConfigured
    from django.db import connection

    with connection.schema_editor() as editor:
        editor.delete_model(Ledger)
    try:
        Worker(models=[Ledger], handle_signals=False)  # not a queue model, but has no table
        with pytest.raises(ImproperlyConfigured, match=r"run 'manage\.py migrate'"):
            Worker(models=[Ledger], burst=True, handle_signals=False).run()
    finally:
        with connection.schema_editor() as editor:
            editor.create_model(Ledger)


def test_workers_register_beat_and_leave(settings) -> None:
    from django_dbqueue.models import WorkerProcess

    settings.DBQUEUE_HEARTBEAT_INTERVAL = 0.2
    Job.objects.bulk_create([Job(name=str(i), sleep=0.1) for i in range(8)])
    worker = Worker(models=[Job], batch_size=2, handle_signals=False, worker_id="beat-1")
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        assert wait_until(lambda: WorkerProcess.objects.filter(worker_id="beat-1").exists(), timeout=10)
        first = WorkerProcess.objects.get(worker_id="beat-1").last_seen_at
        assert wait_until(
            lambda: WorkerProcess.objects.get(worker_id="beat-1").last_seen_at > first, timeout=10
        )
        assert list(WorkerProcess.objects.alive().values_list("worker_id", flat=True)) == ["beat-1"]
        assert WorkerProcess.objects.get().queue_models == "testapp.Job"
    finally:
        worker.stop()
        thread.join(timeout=20)
    assert not WorkerProcess.objects.exists()  # a clean exit removes it


def test_postgresql_notify_wakes_an_idle_worker_at_once() -> None:
    from django.db import connection, transaction

    if connection.vendor != "postgresql":
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's; elsewhere idle workers poll")
    worker = Worker(models=[Job], handle_signals=False, poll_interval=5)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        assert wait_until(
            lambda: worker._listener is not None and worker._listener.listening.is_set(), timeout=10
        )
        time.sleep(1.5)  # idle: the worker now sleeps for seconds between polls
        with pytest.raises(RuntimeError), transaction.atomic():
            Job.objects.create(name="rolled back")
            raise RuntimeError  # a rolled-back enqueue must not swallow later wake-ups
        started = time.monotonic()
        job = Job.objects.create(name="wake up")
        assert wait_until(lambda: Job.objects.get(pk=job.pk).queue_state == "succeeded", timeout=4)
        pickup = time.monotonic() - started
    finally:
        worker.stop()
        thread.join(timeout=20)
    # Polling alone would take up to 5 s here.
    assert pickup < 1.0, pickup


def test_a_lease_mode_worker_skips_rows_it_learns_it_lost() -> None:
    jobs = Job.objects.bulk_create([Job(name=str(i), sleep=0.4) for i in range(6)])
    worker = Worker(models=[Job], batch_size=6, lease=1.2, handle_signals=False)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        assert wait_until(lambda: Ledger.objects.count() >= 1, timeout=10)
        # As if the lease had run out and another worker had rescued and claimed the tail.
        stolen = [job.pk for job in jobs[3:]]
        Job.objects.filter(pk__in=stolen).update(queue_token=12345)
        assert wait_until(lambda: not thread.is_alive() or worker.stats.lost >= 3, timeout=15)
    finally:
        worker.stop()
        thread.join(timeout=20)
    ran = set(Ledger.objects.values_list("job_id", flat=True))
    assert not ran & set(stolen)  # none of the lost rows ran here
    assert worker.stats.lost == 3
    assert Job.objects.filter(pk__in=stolen, queue_token=12345).count() == 3  # and none was overwritten


def test_the_wake_up_receiver_is_connected_only_where_postgresql_is_used() -> None:
    from django.db import connections
    from django.db.models.signals import post_save

    from django_dbqueue.signal_handlers import on_queue_row_saved

    sync_receivers = post_save._live_receivers(Job)[0]
    postgresql = any(connections[alias].vendor == "postgresql" for alias in connections)
    assert (on_queue_row_saved in sync_receivers) is postgresql
