"""Bad input gets a clear error and loses nothing (DESIGN.md invariant 6).

Extends tests/contract/test_processes.py (arguments) and tests/contract/test_worker.py / test_messages.py
(in-process SystemExit, undecodable Message payloads, a missing table) with what they do not
cover: more arguments, bad arguments typed on the command line, BaseException handlers in
real ``runqueue`` processes, rows deleted while claimed, payloads that are too large or not
usable by a QueueMixin handler, and a database that was never migrated.
"""

from __future__ import annotations

import logging
import signal
import threading
import time

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, connections, transaction
from django.db.models import Count
from django.test.utils import isolate_apps

from django_dbqueue.exceptions import Discard
from django_dbqueue.models import Message, QueueAttempt
from django_dbqueue.states import QueueState
from django_dbqueue.worker import Worker
from django_dbqueue.worker.leaks import LeakedTransaction
from tests.conftest import ledger_runs, wait_until
from tests.testapp import models as testapp
from tests.testapp.models import HostileAtomicJob, HostileJob, Job, Ledger

# -- runqueue arguments ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (["--max-jobs", "0"], "at least 1"),
        (["--concurrency", "2.5"], "not a whole number"),
        (["--lease", "0"], "positive number of seconds"),
        (["--lease", "inf"], "positive number of seconds"),
        (["--poll-interval", "soon"], "not a number of seconds"),
        (["--worker-id", ""], "letters, digits"),
        (["--worker-id", "w" * 201], "letters, digits"),
        (["--worker-id", "w'; DROP TABLE testapp_job; --"], "letters, digits"),
        (["--worker-id", "<script>"], "letters, digits"),
        (["--queue", "no spaces"], "letters, digits"),
        (["--queue", "q" * 65], "letters, digits"),
        (["--queue", "emails", "testapp.Job"], "has no 'queue' column"),
        (["a.b.c"], "Unknown model 'a.b.c'"),
        (["testapp.HostileBase"], "Unknown model"),  # abstract: not a registered model
        (["django_dbqueue.QueueAttempt"], "not a concrete QueueMixin model"),
        (["--bogus"], "unrecognized arguments"),
    ],
)
def test_more_bad_arguments_give_a_command_error(args, message) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("runqueue", *args)


@pytest.mark.processes
@pytest.mark.parametrize(
    "args, message",
    [
        (["--max-jobs", "0"], "must be at least 1"),
        (["--worker-id", "bad id; drop"], "letters, digits"),
        (["--bogus"], "unrecognized arguments"),
    ],
)
def test_bad_options_typed_on_the_command_line_get_a_message_not_a_traceback(
    start_worker, args, message
) -> None:
    worker = start_worker(*args)
    assert worker.wait(timeout=60) != 0
    assert message in worker.output and "Traceback" not in worker.output, worker.output


# -- handlers that raise BaseException, in real processes ------------------------------------------


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("model", [HostileJob, HostileAtomicJob], ids=["lease", "atomic"])
@pytest.mark.parametrize(
    "action, reason",
    [("exit", "SystemExit: 3"), ("interrupt", "KeyboardInterrupt")],
    ids=["exit", "interrupt"],
)
def test_a_handler_raising_base_exceptions_fails_its_row_and_runqueue_goes_on(
    start_worker, model, action, reason
) -> None:
    model.objects.bulk_create([model(action="ok") for _ in range(3)])
    hostile = model.objects.create(action=action)
    model.objects.bulk_create([model(action="ok") for _ in range(3)])
    worker = start_worker(model._meta.label, "--burst", "--batch-size", "3")
    assert worker.wait(timeout=120) == 0, worker.output
    hostile.refresh_from_db()
    assert hostile.queue_state == QueueState.FAILED and reason in hostile.queue_last_error
    assert model.objects.filter(queue_state=QueueState.SUCCEEDED).count() == 6
    # The worker process that ran it stopped (the handler asked to exit) and was replaced.
    assert "stopped: a handler raised" in worker.output and "replacing it" in worker.output
    ok_runs = Ledger.objects.filter(kind=model.__name__).exclude(job_id=hostile.pk)
    assert ok_runs.count() == 6  # every other row ran once


# -- the application deletes a claimed row ---------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("model", [HostileJob, HostileAtomicJob], ids=["lease", "atomic"])
@pytest.mark.parametrize("action", ["delete", "delete-then-fail"])
def test_a_row_deleted_while_claimed_is_a_logged_no_op(model, action, caplog) -> None:
    before = model.objects.create(action="ok")
    deleted = model.objects.create(action=action)
    after = model.objects.create(action="ok")
    with caplog.at_level(logging.WARNING, logger="django_dbqueue"):
        stats = Worker(models=[model], burst=True, handle_signals=False, batch_size=3).run()
    states = dict(model.objects.values_list("pk", "queue_state"))
    assert states[before.pk] == states[after.pk] == QueueState.SUCCEEDED
    if model.queue_atomic and action == "delete-then-fail":
        # The failed handler's writes, its DELETE included, were rolled back: the row is
        # still there with the reason, waiting for its retry (or FAILED once it had it).
        deleted.refresh_from_db()
        assert deleted.queue_state in (QueueState.READY, QueueState.FAILED)
        assert "failed after the row was deleted" in deleted.queue_last_error
    else:
        assert deleted.pk not in states
        assert stats.lost == 1
        assert f"pk={deleted.pk}" in caplog.text and "outcome rejected" in caplog.text
    assert stats.succeeded == 2


# -- payloads ----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_stored_payload_over_the_size_limit_ends_failed_and_the_worker_goes_on(settings) -> None:
    big = Message.objects.publish("test.echo", {"blob": "small"}).message
    fine = Message.objects.publish("test.echo", {"ok": True}).message
    settings.DBQUEUE_MAX_PAYLOAD_BYTES = 1000
    # Written past publish() (by SQL, another tool, or before the limit was lowered).
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {connection.ops.quote_name(Message._meta.db_table)} SET payload = %s WHERE id = %s",
            ['{"blob": "' + "x" * 5000 + '"}', big.pk],
        )
    stats = Worker(models=[Message], burst=True, handle_signals=False).run()
    big.refresh_from_db()
    fine.refresh_from_db()
    assert big.queue_state == QueueState.FAILED and big.queue_attempts == 1
    assert "over DBQUEUE_MAX_PAYLOAD_BYTES" in big.queue_last_error
    assert fine.queue_state == QueueState.SUCCEEDED and stats.succeeded == 1


@pytest.mark.django_db(transaction=True)
def test_a_queue_mixin_json_field_holding_garbage_ends_failed_with_the_reason() -> None:
    if not (connection.vendor == "mysql" and connection.mysql_is_mariadb):
        pytest.skip("needs MariaDB, whose JSON check constraint can be dropped")
    bad = HostileJob.objects.create(action="payload", data={"n": 1})
    wrong_type = HostileJob.objects.create(action="payload", data={"n": "one"})
    fine = HostileJob.objects.create(action="payload", data={"n": 2})
    table = HostileJob._meta.db_table

    def execute(sql: str, params: list | None = None) -> None:
        with connection.cursor() as cursor:  # a fresh cursor: the worker closes connections
            cursor.execute(sql, params)

    # A table altered by other tooling: the JSON_VALID check is gone and garbage got in.
    execute(f"ALTER TABLE {table} MODIFY data LONGTEXT NULL")
    try:
        execute(f"UPDATE {table} SET data = %s WHERE id = %s", ["{not json", bad.pk])
        Worker(models=[HostileJob], burst=True, handle_signals=False).run()
        rows = {
            pk: (state, error)
            for pk, state, error in HostileJob.objects.values_list("pk", "queue_state", "queue_last_error")
        }
    finally:
        execute(f"DELETE FROM {table}")
        execute(f"ALTER TABLE {table} MODIFY data LONGTEXT NULL CHECK (json_valid(data))")
    assert rows[fine.pk][0] == QueueState.SUCCEEDED
    assert rows[bad.pk][0] == QueueState.FAILED and "unusable payload: '{not json'" in rows[bad.pk][1]
    assert rows[wrong_type.pk][0] == QueueState.FAILED and "unusable payload" in rows[wrong_type.pk][1]


# -- a database that was never migrated -------------------------------------------------------------


@pytest.mark.processes
def test_runqueue_on_a_database_without_the_tables_stops_with_a_message(start_worker, tmp_path) -> None:
    empty = tmp_path / "never-migrated.sqlite3"
    empty.touch()
    started = time.monotonic()
    worker = start_worker(
        "testapp.Job",
        "--concurrency",
        "2",
        extra_env={"DATABASE_URL": f"sqlite:///{empty}", "DBQUEUE_TEST_DB_NAME": str(empty)},
    )
    assert worker.wait(timeout=60) == 1
    assert time.monotonic() - started < 30  # no retry loop
    assert "the table 'testapp_job' of testapp.Job does not exist" in worker.output
    assert "run 'manage.py migrate'" in worker.output and "Traceback" not in worker.output


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_runqueue_stops_with_a_message_when_a_queue_table_disappears_while_it_runs(start_worker) -> None:
    # e.g. `migrate testapp zero` run against a live deployment: the workers must not be
    # replaced forever, each crashing on the missing table.
    from tests.conftest import wait_until
    from tests.testapp.models import Job

    Job.objects.create(name="first")
    worker = start_worker("testapp.Job", "--poll-interval", "0.1")
    assert wait_until(lambda: Ledger.objects.filter(kind="Job").exists(), timeout=30)
    with connection.schema_editor() as editor:
        editor.delete_model(Job)
    try:
        started = time.monotonic()
        assert worker.wait(timeout=60) == 1
        assert time.monotonic() - started < 30
    finally:
        with connection.schema_editor() as editor:
            editor.create_model(Job)
    assert "the table 'testapp_job' of testapp.Job does not exist" in worker.output, worker.output
    assert worker.output.count("replacing it") <= 1, worker.output


# -- a poison row that kills its worker (issue #21, item 1) -----------------------------------------


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("model", [HostileJob, HostileAtomicJob], ids=["lease", "atomic"])
def test_a_row_that_kills_its_worker_fails_alone_and_its_batch_runs_on(start_worker, model) -> None:
    poison = model.objects.create(action="crash")  # first in claim order
    model.objects.bulk_create([model(action="ok") for _ in range(99)])
    worker = start_worker(
        model._meta.label,
        "--lease",
        "2",
        "--batch-size",
        "100",
        "--poll-interval",
        "0.1",
        extra_env={"DBQUEUE_TEST_RESCUE_INTERVAL": "0.5"},
    )
    finished = (QueueState.SUCCEEDED, QueueState.FAILED)
    done = wait_until(lambda: not model.objects.exclude(queue_state__in=finished).exists(), timeout=120)
    worker.signal(signal.SIGTERM)
    worker.wait(timeout=60)
    assert done, (
        dict(model.objects.values_list("queue_state").annotate(n=Count("pk"))),
        worker.output[-3000:],
    )
    poison.refresh_from_db()
    assert poison.queue_state == QueueState.FAILED, poison.queue_last_error
    # Its supervisor saw how the worker ended (issue #31, item 8) and says so; a row the dead
    # session still locked (atomic mode, before the server noticed) came back by its lease.
    assert poison.queue_last_error.endswith(", on the last allowed attempt") and (
        "worker process exited with status 70" in poison.queue_last_error
        or "crashed, was killed or hung" in poison.queue_last_error
    ), poison.queue_last_error
    assert poison.queue_attempts == model.queue_retry.max_attempts
    good = model.objects.exclude(pk=poison.pk)
    assert good.filter(queue_state=QueueState.SUCCEEDED).count() == 99
    attempts = sorted(set(good.values_list("queue_attempts", flat=True)))
    assert attempts and max(attempts) <= 2, attempts
    runs = Ledger.objects.filter(kind=model.__name__).exclude(job_id=poison.pk).values("job_id")
    per_row = runs.annotate(n=Count("id")).values_list("n", flat=True)
    assert max(per_row) <= 2  # at least once; a row never ran more than twice
    # Every run has its own attempt number: the lost ones are in the history too.
    lost = QueueAttempt.objects.filter(model=model._meta.label, outcome="lost")
    assert str(poison.pk) in set(lost.values_list("object_id", flat=True))


# -- async and generator handlers (issue #21, item 3) -------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_async_handlers_run_and_their_failures_count() -> None:
    from tests.testapp.models import AsyncJob

    ok, failing = AsyncJob.objects.create(name="ok"), AsyncJob.objects.create(name="f", action="fail")
    Worker(models=[AsyncJob], burst=True, handle_signals=False, max_jobs=2).run()
    assert AsyncJob.objects.get(pk=ok.pk).queue_state == QueueState.SUCCEEDED
    failed = AsyncJob.objects.get(pk=failing.pk)
    assert failed.queue_state == QueueState.READY and "async failure" in failed.queue_last_error
    assert Ledger.objects.filter(kind="AsyncJob").count() == 2


@pytest.mark.django_db(transaction=True)
def test_an_async_atomic_handlers_writes_commit_and_roll_back_with_its_job() -> None:
    from tests.testapp.models import AsyncAtomicJob

    ok = AsyncAtomicJob.objects.create(name="ok")
    failing = AsyncAtomicJob.objects.create(name="f", action="fail")
    Worker(models=[AsyncAtomicJob], burst=True, handle_signals=False, max_jobs=2).run()
    assert AsyncAtomicJob.objects.get(pk=ok.pk).queue_state == QueueState.SUCCEEDED
    assert Ledger.objects.filter(kind="AsyncAtomicJob", job_id=ok.pk).count() == 1
    # The failing handler's write was in its job's transaction: rolled back with it.
    assert not Ledger.objects.filter(kind="AsyncAtomicJob", job_id=failing.pk).exists()


@isolate_apps("tests.testapp")
def test_a_generator_handler_is_refused_by_a_check_and_fails_its_row() -> None:
    from django.db import models

    from django_dbqueue.checks import _check_model
    from django_dbqueue.models import QueueMixin

    class Yielding(QueueMixin):
        name = models.CharField(max_length=10)

        class Meta(QueueMixin.Meta):
            app_label = "testapp"

        def process(self):  # type: ignore[no-untyped-def]
            yield "nothing runs"

    assert "django_dbqueue.E007" in {message.id for message in _check_model(Yielding)}
    error = Worker(models=[Yielding], handle_signals=False).call(Yielding(name="y"))
    assert isinstance(error, Discard) and "generator function" in str(error)


# -- handlers that leave a transaction open (issue #21, item 4) ------------------------------------


def _enter_atomic_and_stay(row: object) -> None:
    transaction.atomic().__enter__()


def _autocommit_off(row: object) -> None:
    transaction.set_autocommit(False)


def _raw_begin(row: object) -> None:
    with connection.cursor() as cursor:
        cursor.execute("BEGIN")


def _in_a_thread(target) -> None:  # type: ignore[no-untyped-def]
    """Run ``target`` on a thread of its own: its connection, whatever the handler leaves on it."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            target()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=120)
    if errors:
        raise errors[0]


def _drain_in_a_thread(model: type, **options: object) -> Worker:
    worker = Worker(models=[model], burst=True, handle_signals=False, **options)  # type: ignore[arg-type]
    _in_a_thread(worker.run)
    return worker


@pytest.mark.django_db(transaction=True)
def test_a_handler_that_leaves_atomic_open_fails_and_its_worker_stops_cleanly(monkeypatch) -> None:
    monkeypatch.setitem(testapp.HANDLER_HOOKS, "leak", _enter_atomic_and_stay)
    Job.objects.bulk_create([Job(name="ok"), Job(name="leak"), Job(name="ok"), Job(name="ok")])
    worker = _drain_in_a_thread(Job, batch_size=4)
    assert isinstance(worker.fatal, LeakedTransaction)
    leaked = Job.objects.get(name="leak")
    assert leaked.queue_state == QueueState.READY and "did not leave it" in leaked.queue_last_error
    assert not Job.objects.filter(queue_state=QueueState.RUNNING).exists()  # nothing stuck
    assert Job.objects.filter(name="ok", queue_state=QueueState.SUCCEEDED).count() == 1
    _in_a_thread(lambda: Worker(models=[Job], burst=True, handle_signals=False, max_jobs=2).run())
    assert Job.objects.filter(name="ok", queue_state=QueueState.SUCCEEDED).count() == 3


@pytest.mark.django_db(transaction=True)
def test_a_handler_that_turns_autocommit_off_fails_alone_and_the_worker_goes_on(monkeypatch) -> None:
    monkeypatch.setitem(testapp.HANDLER_HOOKS, "leak", _autocommit_off)
    Job.objects.bulk_create([Job(name="ok"), Job(name="leak"), Job(name="ok")])
    stats = Worker(models=[Job], burst=True, handle_signals=False, batch_size=3, max_jobs=3).run()
    assert stats.succeeded == 2 and stats.failed == 1
    leaked = Job.objects.get(name="leak")
    assert leaked.queue_state == QueueState.READY and "autocommit off" in leaked.queue_last_error
    assert connection.get_autocommit()


@pytest.mark.django_db(transaction=True)
def test_a_handler_that_sends_a_raw_begin_fails_alone(monkeypatch) -> None:
    monkeypatch.setitem(testapp.HANDLER_HOOKS, "leak", _raw_begin)
    Job.objects.bulk_create([Job(name="ok"), Job(name="leak"), Job(name="ok")])
    for _ in range(20):
        Worker(models=[Job], burst=True, handle_signals=False).run()
        if not Job.objects.exclude(queue_state__in=[QueueState.SUCCEEDED, QueueState.FAILED]).exists():
            break
        time.sleep(0.3)  # the leaking row's retries wait out their backoff
    leaked = Job.objects.get(name="leak")
    assert leaked.queue_state == QueueState.FAILED and "raw BEGIN" in leaked.queue_last_error
    assert leaked.queue_attempts == Job.queue_retry.max_attempts
    assert Job.objects.filter(name="ok", queue_state=QueueState.SUCCEEDED).count() == 2
    # A row that ran before the BEGIN in the same flush is run again (at least once): its
    # uncounted attempt reuses its number, which the test's Ledger refuses once.
    assert max(Job.objects.filter(name="ok").values_list("queue_attempts", flat=True)) <= 2


# -- the database turns read-only (issue #21, item 5) -------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_read_only_database_is_waited_out_with_a_clear_line(caplog) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's default_transaction_read_only (MariaDB's read_only spares root)")
    name = connection.settings_dict["NAME"]
    Job.objects.create(name="after")
    with connection.cursor() as cursor:
        cursor.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
    worker = Worker(models=[Job], handle_signals=False, poll_interval=0.05)
    thread = threading.Thread(target=worker.run)
    try:
        with caplog.at_level(logging.WARNING, logger="django_dbqueue.worker"):
            thread.start()
            assert wait_until(lambda: "read-only" in caplog.text, timeout=30), caplog.text
            assert thread.is_alive()  # waiting, not crashed
            with connection.cursor() as cursor:
                cursor.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = off')
            assert wait_until(lambda: Job.objects.get().queue_state == QueueState.SUCCEEDED, timeout=60)
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = off')
        worker.stop()
        thread.join(timeout=30)
    assert "Traceback" not in caplog.text


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "grouped, first_run_successes",
    [("", 1), ("GroupedAtomicJob", 0), ("OptimisticGroupJob", 0)],
    ids=["one", "group", "optimistic group"],
)
def test_an_atomic_handler_that_leaves_atomic_open_fails_and_holds_no_lock(
    monkeypatch, grouped, first_run_successes
) -> None:
    # The fault table (tests/chaos/faults, e1): the worker's own atomic() closed the handler's
    # block instead, its transaction never ended and kept the batch's rows locked for good.
    # In a group nothing commits and every row runs again alone (one of them did it).
    from tests.testapp import models

    AtomicJob = getattr(models, grouped or "AtomicJob")  # noqa: N806
    monkeypatch.setitem(testapp.HANDLER_HOOKS, "leak", _enter_atomic_and_stay)
    AtomicJob.objects.bulk_create([AtomicJob(name=name) for name in ("ok", "leak", "ok", "ok")])
    worker = _drain_in_a_thread(AtomicJob, batch_size=4)
    assert isinstance(worker.fatal, LeakedTransaction)
    leaked = AtomicJob.objects.get(name="leak")
    assert leaked.queue_state == QueueState.READY and "did not leave it" in leaked.queue_last_error
    assert not Ledger.objects.filter(kind=AtomicJob.__name__, job_id=leaked.pk).exists()  # rolled back
    assert not AtomicJob.objects.filter(queue_state=QueueState.RUNNING).exists()
    ok = AtomicJob.objects.filter(name="ok", queue_state=QueueState.SUCCEEDED)
    assert ok.count() == first_run_successes
    # The rows given back are not locked by a transaction left open: a new worker takes them.
    monkeypatch.delitem(testapp.HANDLER_HOOKS, "leak")
    _in_a_thread(lambda: Worker(models=[AtomicJob], burst=True, handle_signals=False).run())
    assert AtomicJob.objects.filter(name="ok", queue_state=QueueState.SUCCEEDED).count() == 3
    assert all(n == 1 for n in ledger_runs(AtomicJob).values())  # nothing committed twice


def _close_driver_connection(row: object) -> None:
    connection.connection.close()  # under Django's feet, as a hostile handler would


@pytest.mark.django_db(transaction=True)
def test_a_handler_that_closes_its_connection_costs_a_reconnect_not_the_worker(monkeypatch) -> None:
    # The fault table (tests/chaos/faults, c1): closing the dead connection again raised out of
    # the outage path, and the worker process died with a traceback.
    if connection.vendor == "sqlite":
        pytest.skip("an SQLite connection closed by the handler is not an outage")
    monkeypatch.setitem(testapp.HANDLER_HOOKS, "close", _close_driver_connection)
    Job.objects.bulk_create([Job(name="close"), Job(name="ok")])
    worker = _drain_in_a_thread(Job, batch_size=2)  # returns: it reconnected, not crashed
    assert worker.fatal is None
    # Nothing is lost: the batch it dropped waits for its lease (the rescue brings it back).
    states = set(Job.objects.values_list("queue_state", flat=True))
    assert states <= {QueueState.RUNNING, QueueState.SUCCEEDED} and Job.objects.count() == 2
