"""Real ``runqueue`` processes against the real database: concurrency, crashes, signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.db.models import Count

from django_dbqueue.states import QueueState
from tests.conftest import leases_run_out, skip_on_sqlite, wait_until
from tests.testapp.models import AtomicJob, Job, Ledger, Ticket, TimeoutJob

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]


def is_locked_elsewhere(model, pk) -> bool:
    """True while another transaction holds the row's lock (SKIP LOCKED then skips it)."""
    with transaction.atomic():
        return not model.objects.filter(pk=pk).select_for_update(skip_locked=True).exists()


def runs_per_row(model) -> dict[int, int]:
    rows = Ledger.objects.filter(kind=model.__name__).values("job_id").annotate(n=Count("id"))
    return {row["job_id"]: row["n"] for row in rows}


def states(model) -> dict[str, int]:
    rows = model.objects.values("queue_state").annotate(n=Count("pk"))
    return {row["queue_state"]: row["n"] for row in rows}


def drain_size() -> int:
    """20,000 rows on the servers, where the four processes claim side by side; SQLite serialises
    its writers, so they take turns, and 5,000 rows prove the same (each row once, every process
    in play) in a quarter of the time."""
    return 5_000 if connection.vendor == "sqlite" else 20_000


def test_four_processes_drain_20000_rows_each_exactly_once(start_worker) -> None:
    rows = drain_size()
    Job.objects.bulk_create([Job(name=str(i)) for i in range(rows)], batch_size=5000)
    worker = start_worker("testapp.Job", "--concurrency", "4", "--batch-size", "50", "--burst")
    assert worker.wait(timeout=300) == 0, worker.output
    assert states(Job) == {"succeeded": rows}
    ran = runs_per_row(Job)
    assert len(ran) == rows and set(ran.values()) == {1}
    # All four processes took part (pids recorded by the handlers).
    assert Ledger.objects.values("pid").distinct().count() == 4
    assert f"{rows} succeeded" in worker.output


@pytest.mark.parametrize("model", [Job, AtomicJob], ids=["lease", "atomic"])
def test_sigkill_mid_batch_loses_nothing(start_worker, model) -> None:
    model.objects.bulk_create([model(name=str(i), sleep=0.02) for i in range(300)])
    first = start_worker(model._meta.label, "--concurrency", "2", "--batch-size", "40", "--lease", "1")
    assert wait_until(lambda: Ledger.objects.count() >= 60, timeout=60)
    first.kill_all()
    first.wait()
    stuck = model.objects.filter(queue_state=QueueState.RUNNING).count()
    assert stuck > 0  # killed mid-batch: claimed rows were left RUNNING
    assert wait_until(leases_run_out(model), timeout=30)  # the next worker's rescue returns the rows
    second = start_worker(model._meta.label, "--concurrency", "2", "--batch-size", "40", "--burst")
    assert second.wait(timeout=180) == 0, second.output
    assert states(model) == {"succeeded": 300}
    ran = runs_per_row(model)
    assert len(ran) == 300
    if model.queue_atomic:
        # The handler's write commits with the outcome: the killed attempts left nothing.
        assert set(ran.values()) == {1}
    else:
        # At-least-once: only rows held by the killed processes may have run twice.
        assert sum(n - 1 for n in ran.values()) <= stuck
    assert "rescued" in second.output


def test_late_outcome_from_a_lost_claim_is_rejected(start_worker, tmp_path) -> None:
    started = tmp_path / "started"
    job = Job.objects.create(name="slow", sleep=1.5, action="mark", note=str(started))
    slow = start_worker("testapp.Job", "--lease", "1", "--batch-size", "1")
    # Frozen inside its handler, not between the claim and the handler: a worker that finds,
    # when it runs again, that a row it has not started was taken over skips it (worker/
    # leased.py), and this test is about the outcome of a run that did start.
    assert wait_until(started.exists, timeout=30)
    [pid] = slow.worker_pids()
    os.kill(pid, signal.SIGSTOP)  # frozen: it cannot renew its lease
    try:
        assert wait_until(leases_run_out(Job), timeout=30)
        other = start_worker("testapp.Job", "--burst", "--lease", "30")
        assert other.wait(timeout=60) == 0, other.output
        job.refresh_from_db()
        assert job.queue_state == QueueState.SUCCEEDED
        winner = job.queue_token
    finally:
        os.kill(pid, signal.SIGCONT)
    assert wait_until(lambda: Ledger.objects.filter(job_id=job.pk).count() == 2, timeout=30)
    time.sleep(0.5)
    slow.signal(signal.SIGTERM)
    assert slow.wait(timeout=30) == 0
    assert "late outcome rejected" in slow.output
    job.refresh_from_db()
    assert (job.queue_state, job.queue_token) == (QueueState.SUCCEEDED, winner)


@skip_on_sqlite  # one writer: the frozen worker's open transaction blocks the second worker
def test_atomic_writes_commit_once_when_the_lease_expired_and_another_worker_took_the_row(
    start_worker,
) -> None:
    first, _ = AtomicJob.objects.bulk_create([AtomicJob(name=str(i), sleep=1.0) for i in range(2)])
    slow = start_worker("testapp.AtomicJob", "--lease", "1", "--batch-size", "2")
    assert wait_until(
        lambda: AtomicJob.objects.filter(queue_state=QueueState.RUNNING).count() == 2, timeout=30
    )
    # Freeze it only once its transaction holds the first row's lock (its handler runs).
    assert wait_until(lambda: is_locked_elsewhere(AtomicJob, first.pk), timeout=30)
    [pid] = slow.worker_pids()
    os.kill(pid, signal.SIGSTOP)  # holds the first row's lock, its leases run out
    try:
        assert wait_until(leases_run_out(AtomicJob), timeout=30)
        other = start_worker("testapp.AtomicJob", "--burst", "--lease", "30")
        assert other.wait(timeout=60) == 0, other.output
        # The locked row was skipped by the rescue (its worker still holds it); the other
        # row was rescued and done by the second worker.
        assert states(AtomicJob) == {"running": 1, "succeeded": 1}
    finally:
        os.kill(pid, signal.SIGCONT)
    assert wait_until(lambda: states(AtomicJob) == {"succeeded": 2}, timeout=30)
    slow.signal(signal.SIGTERM)
    assert slow.wait(timeout=30) == 0
    assert set(runs_per_row(AtomicJob).values()) == {1}
    assert "no longer held" in slow.output


def test_sigterm_finishes_the_current_job_and_gives_back_the_rest(start_worker) -> None:
    Job.objects.bulk_create([Job(name=str(i), sleep=0.2) for i in range(60)])
    worker = start_worker("testapp.Job", "--concurrency", "2", "--batch-size", "10")
    assert wait_until(lambda: Ledger.objects.count() >= 4, timeout=30)
    started = time.monotonic()
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0, worker.output
    assert time.monotonic() - started < 5
    counts = states(Job)
    assert counts.get("running", 0) == 0
    assert counts["succeeded"] + counts["ready"] == 60
    assert Job.objects.filter(queue_state="ready").exclude(queue_attempts=0).count() == 0
    assert set(runs_per_row(Job).values()) == {1}
    assert "given back" in worker.output


def test_second_signal_exits_at_once_and_leases_bring_the_rows_back(start_worker) -> None:
    Job.objects.bulk_create([Job(name=str(i), sleep=2) for i in range(4)])
    worker = start_worker("testapp.Job", "--batch-size", "4", "--lease", "1")
    assert wait_until(lambda: Job.objects.filter(queue_state="running").count() == 4, timeout=30)
    # RUNNING is visible at the claim's commit, a moment before the first handler starts; a
    # signal in that moment finds no job running and gives all four back (a clean exit, 0).
    # The first job sleeps 2 s: half a second in, it is running.
    time.sleep(0.5)
    started = time.monotonic()
    worker.signal(signal.SIGINT)
    time.sleep(0.2)
    worker.signal(signal.SIGINT)
    assert worker.wait(timeout=10) != 0, worker.output
    assert time.monotonic() - started < 1.5
    rescued = [0]

    def all_rescued() -> bool:
        rescued[0] += Job.objects.rescue_expired()
        return rescued[0] == 4

    assert wait_until(all_rescued, timeout=15, interval=0.2)  # once their 1 s leases ran out


def test_handler_that_ignores_its_timeout_is_stopped_and_recorded(start_worker) -> None:
    job = TimeoutJob.objects.create(name="hang", action="hang")
    worker = start_worker("testapp.TimeoutJob", "--burst", "--lease", "30")
    assert worker.wait(timeout=120) == 0, worker.output
    job.refresh_from_db()
    assert job.queue_state == QueueState.FAILED and job.queue_attempts == 3
    assert "timed out after 0.5 s" in job.queue_last_error
    assert "ignored its timeout" in worker.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["nope.Model"], "Unknown model"),
        (["testapp"], "Unknown model"),
        (["testapp.Ledger"], "not a concrete QueueMixin model"),
        (["--concurrency", "0"], "at least 1"),
        (["--batch-size", "many"], "not a whole number"),
        (["--poll-interval", "-1"], "positive number of seconds"),
        (["--lease", "nan"], "positive number of seconds"),
        (["--worker-id", "bad id; drop"], "letters, digits"),
        (["--database", "missing"], "Unknown database alias"),
    ],
)
def test_bad_arguments_give_a_command_error(args, message) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("runqueue", *args)


def test_bad_arguments_from_the_command_line_exit_with_a_message(start_worker) -> None:
    worker = start_worker("nope.Model")
    assert worker.wait(timeout=60) == 1
    assert "Unknown model 'nope.Model'" in worker.output and "Traceback" not in worker.output


def test_burst_shows_a_progress_bar_on_a_terminal(start_worker) -> None:
    import sys

    from django.db import connection

    from tests.conftest import run_on_terminal

    Job.objects.bulk_create([Job(name=str(i)) for i in range(300)])
    connection.close()
    env = {**os.environ, "DBQUEUE_TEST_DB_NAME": str(connection.settings_dict["NAME"])}
    command = [sys.executable, "-m", "django", "runqueue", "--settings", "tests.settings"]
    text = run_on_terminal([*command, "testapp.Job", "--burst", "-v0"], env, timeout=60)
    assert "draining" in text and "300/300" in text, text[-2000:]
    assert states(Job) == {"succeeded": 300}


def test_runqueue_waits_for_a_database_that_is_not_up_yet(start_worker) -> None:
    from django.db import connection

    if connection.vendor != "mysql":
        pytest.skip("points the worker at a MySQL port where nothing listens")
    # Nothing listens on this port: like a deploy that starts workers before the database.
    down = {"DATABASE_URL": "mysql://root@127.0.0.1:3399/nowhere", "DBQUEUE_TEST_DB_NAME": "nowhere"}
    worker = start_worker("testapp.Job", extra_env=down)
    time.sleep(3)
    assert worker.proc.poll() is None  # still waiting, not crashed
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0
    assert "waiting for the database" in worker.output and "Traceback" not in worker.output


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A killed child of a killed parent may linger as a zombie until init reaps it.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_sigkill_of_the_process_group_stops_every_worker_at_once(start_worker) -> None:
    """issue #20, defect 19: the workers share runqueue's process group."""
    Job.objects.bulk_create([Job(name=str(i), sleep=30) for i in range(2)])
    worker = start_worker("testapp.Job", "--concurrency", "2", "--batch-size", "1")
    assert wait_until(lambda: Job.objects.filter(queue_state=QueueState.RUNNING).count() == 2, timeout=60)
    children = worker.worker_pids()
    assert len(children) == 2
    os.killpg(worker.proc.pid, signal.SIGKILL)
    out, _ = worker.proc.communicate(timeout=10)
    assert wait_until(lambda: not any(map(_alive, children)), timeout=5), "workers outlived the group"
    assert "BrokenPipeError" not in out


def test_ctrl_c_to_the_group_is_one_graceful_stop(start_worker) -> None:
    """A terminal's Ctrl-C reaches the whole group: the workers leave it to the supervisor,
    whose one SIGTERM lets the running job finish."""
    Job.objects.create(name="slow", sleep=3)
    worker = start_worker("testapp.Job", "--concurrency", "2")
    assert wait_until(lambda: Job.objects.filter(queue_state=QueueState.RUNNING).exists(), timeout=60)
    time.sleep(1)  # from claimed to running its handler
    os.killpg(worker.proc.pid, signal.SIGINT)
    assert worker.wait(timeout=60) == 0, worker.output
    assert Job.objects.get().queue_state == QueueState.SUCCEEDED
    assert "second signal" not in worker.output


def test_the_mysql_connector_backend_creates_and_runs_rows(start_worker) -> None:
    """issue #20, defect 10: Oracle's ``mysql.connector.django`` backend, end to end."""
    if connection.vendor != "mysql":
        pytest.skip("a MySQL/MariaDB backend")
    pytest.importorskip("mysql.connector.django")
    engine = {"DBQUEUE_TEST_ENGINE": "mysql.connector.django"}
    create = (
        "from tests.testapp.models import AtomicJob, Job, Ticket; "
        "Job.objects.create(name='c'); AtomicJob.objects.create(name='c'); Ticket.objects.create(subject='c')"
    )
    env = {**os.environ, **engine, "DBQUEUE_TEST_DB_NAME": str(connection.settings_dict["NAME"])}
    connection.close()
    done = subprocess.run(
        [sys.executable, "-m", "django", "shell", "--settings", "tests.settings", "-c", create],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    worker = start_worker("testapp.Job", "testapp.AtomicJob", "testapp.Ticket", "--burst", extra_env=engine)
    assert worker.wait(timeout=120) == 0, worker.output
    for model in (Job, AtomicJob, Ticket):
        assert states(model) == {QueueState.SUCCEEDED: 1}, (model, worker.output)


def test_runqueue_warns_when_its_fleet_would_take_most_free_sessions(start_worker) -> None:
    """issue #21, item 9: 2 sessions per worker process (3 with LISTEN), and a warning."""
    from django_dbqueue.worker.sessions import room_warning, sessions_needed

    if connection.vendor == "sqlite":
        pytest.skip("SQLite has no session limit")
    room = connection_room()
    assert room is not None
    _, limit = room
    assert room_warning(1, "default", burst=True) is None
    crowd = limit // 2 + 1  # two sessions each: more than the server has
    assert sessions_needed(crowd, "default", burst=True) == 2 * crowd + 1
    assert f"--concurrency {crowd}" in (room_warning(crowd, "default", burst=True) or "")
    worker = start_worker("testapp.Job", "--concurrency", str(crowd), "--burst", "--no-progress")
    # The warning comes before any worker starts: once the supervisor has children, it is out
    # (a fixed sleep was too short on a loaded machine, where Django's start-up alone took longer).
    assert wait_until(lambda: bool(worker.children()), timeout=60)
    worker.kill_all()
    out, _ = worker.proc.communicate(timeout=30)
    assert "Warning: runqueue --concurrency" in out and "max_connections" in out


def connection_room():  # type: ignore[no-untyped-def]
    from django_dbqueue.backends import backend_for

    return backend_for("default").session_room()
