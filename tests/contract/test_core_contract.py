"""The core on Django's public API: what users and their instrumentation see (issue #20).

Each test names the defect it pins down; all run on a real database.
"""

from __future__ import annotations

from datetime import datetime

import django
import pytest
from django.core.management import call_command
from django.db import connection, connections, transaction
from django.db.models.signals import pre_save
from django.forms import modelform_factory
from django.test import TestCase
from django.test.utils import CaptureQueriesContext

from django_dbqueue.models import QueueAttempt, TaskRecord
from django_dbqueue.states import QueueState
from django_dbqueue.worker import Worker
from tests.testapp import models as testapp
from tests.testapp.models import AtomicJob, GroupedAtomicJob, Job, Ledger, OptimisticGroupJob, Ticket


def run(*models: type) -> Worker:
    worker = Worker(models=list(models), burst=True, handle_signals=False)
    worker.run()
    return worker


class StatementLog:
    """An execute wrapper, as sentry-sdk, django-prometheus and OpenTelemetry install one."""

    def __init__(self) -> None:
        self.sql: list[str] = []

    def __call__(self, execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        self.sql.append(sql)
        return execute(sql, params, many, context)


# -- 3: one neighbour of an atomic group fails alone ------------------------------------------


def _duplicate_key(row: object) -> None:
    Ledger.objects.create(kind="dup", job_id=0, attempt=0)
    Ledger.objects.create(kind="dup", job_id=0, attempt=0)  # IntegrityError


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("model", [GroupedAtomicJob, OptimisticGroupJob], ids=["savepoints", "optimistic"])
def test_a_failing_handler_of_an_atomic_group_rolls_back_alone(
    monkeypatch: pytest.MonkeyPatch, model
) -> None:
    monkeypatch.setitem(testapp.HANDLER_HOOKS, "dup", _duplicate_key)
    rows = model.objects.bulk_create(
        [model(name="ok") for _ in range(3)] + [model(name="dup"), model(name="rb", action="mark-rollback")]
    )
    Worker(models=[model], burst=True, handle_signals=False, batch_size=5, max_jobs=5).run()
    states = {row.name: row for row in model.objects.all()}
    ok = model.objects.filter(name="ok")
    assert {row.queue_state for row in ok} == {QueueState.SUCCEEDED}
    assert Ledger.objects.filter(kind=model.__name__, job_id__in=[r.pk for r in ok]).count() == 3
    dup, rolled_back = states["dup"], states["rb"]
    assert dup.queue_state == QueueState.READY and "IntegrityError" in dup.queue_last_error
    assert rolled_back.queue_state == QueueState.READY
    assert "marked for rollback" in rolled_back.queue_last_error
    # Nothing of theirs committed: not the ledger rows written before they failed.
    assert not Ledger.objects.filter(job_id__in=[dup.pk, rolled_back.pk]).exists()
    assert not Ledger.objects.filter(kind="dup").exists()
    assert len(rows) == 5


# -- 4: handler writes past the ORM commit like any autocommit write ----------------------------


def _raw_insert(row: object, kind: str) -> None:
    raw = connection.connection  # the DB-API connection, as a C extension or library would use it
    cursor = raw.cursor()
    table = connection.ops.quote_name(Ledger._meta.db_table)
    cursor.execute(
        f"INSERT INTO {table} (kind, job_id, attempt, pid) VALUES (%s, %s, 1, 0)",
        [kind, row.pk],  # type: ignore[attr-defined]
    )
    cursor.close()


def _raw_write_then_a_rolled_back_block(row: object) -> None:
    _raw_insert(row, "raw")
    try:
        with transaction.atomic():
            Ledger.objects.create(kind="inner", job_id=0, attempt=0)
            raise ValueError("the handler's own block rolls back")
    except ValueError:
        pass


def _raw_write_then_fail(row: object) -> None:
    _raw_insert(row, "rawfail")
    raise ValueError("fails after a raw write")


@pytest.mark.django_db(transaction=True)
def test_raw_db_api_writes_of_a_lease_handler_commit_by_themselves(monkeypatch, second_connection) -> None:
    if connection.vendor != "mysql":
        pytest.skip("MySQL's DB-API connection: autocommit as Django leaves it")
    monkeypatch.setitem(testapp.HANDLER_HOOKS, "raw", _raw_write_then_a_rolled_back_block)
    job = Job.objects.create(name="raw")
    run(Job)
    with second_connection.cursor() as cursor:
        table = second_connection.ops.quote_name(Ledger._meta.db_table)
        cursor.execute(f"SELECT COUNT(*) FROM {table} WHERE kind = 'raw' AND job_id = %s", [job.pk])
        assert cursor.fetchone()[0] == 1
    assert not Ledger.objects.filter(kind="inner").exists()
    assert Job.objects.get(pk=job.pk).queue_state == QueueState.SUCCEEDED


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("model", [GroupedAtomicJob, OptimisticGroupJob], ids=["savepoints", "optimistic"])
def test_raw_db_api_writes_of_a_failing_grouped_handler_roll_back_with_it(monkeypatch, model) -> None:
    if connection.vendor != "mysql":
        pytest.skip("MySQL's DB-API connection inside Django's transaction")
    monkeypatch.setitem(testapp.HANDLER_HOOKS, "rawfail", _raw_write_then_fail)
    model.objects.bulk_create([model(name="ok"), model(name="rawfail")])
    Worker(models=[model], burst=True, handle_signals=False, max_jobs=2).run()
    assert not Ledger.objects.filter(kind="rawfail").exists()
    assert model.objects.get(name="ok").queue_state == QueueState.SUCCEEDED
    assert Ledger.objects.filter(kind=model.__name__).count() == 1  # the success's, once


# -- 5: every statement passes through Django's cursor -------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_instrumentation_sees_create_and_every_statement_of_atomic_mode(settings, monkeypatch) -> None:
    """Patched as sentry-sdk, django-prometheus and OpenTelemetry patch Django: the cursor
    wrapper's execute methods and the connection's commit."""
    from django.db.backends.utils import CursorWrapper

    settings.DEBUG = False
    seen: list[str] = []
    commits: list[str] = []
    wrapper_class = type(connections["default"])
    execute, commit = CursorWrapper.execute, wrapper_class.commit

    def watched_execute(self, sql, params=None):  # type: ignore[no-untyped-def]
        seen.append(sql)
        return execute(self, sql, params)

    def watched_commit(self):  # type: ignore[no-untyped-def]
        commits.append(self.alias)
        return commit(self)

    monkeypatch.setattr(CursorWrapper, "execute", watched_execute)
    monkeypatch.setattr(wrapper_class, "commit", watched_commit)
    Ticket.objects.create(subject="seen")
    table = connection.ops.quote_name(Ticket._meta.db_table)
    assert any(sql.lstrip().upper().startswith("INSERT") and table in sql for sql in seen)
    AtomicJob.objects.bulk_create([AtomicJob(name="a"), AtomicJob(name="b")])
    seen.clear()
    commits.clear()
    run(AtomicJob)
    job_table = connection.ops.quote_name(AtomicJob._meta.db_table)
    if connection.features.has_select_for_update:
        assert sum("FOR UPDATE" in sql for sql in seen) >= 3  # the claim, and each job's fenced lock
    assert sum(sql.startswith(f"UPDATE {job_table}") for sql in seen) >= 3  # the claim, two outcomes
    assert sum(QueueAttempt._meta.db_table in sql and "INSERT" in sql.upper() for sql in seen) == 2
    assert len(commits) >= 3  # the claim's and each job's


# -- 6: an in-process worker inside a TestCase -----------------------------------------------------


class InProcessWorkerInATestCase(TestCase):
    def test_atomic_and_lease_models_run_in_the_tests_transaction(self) -> None:
        AtomicJob.objects.create(name="a")
        Job.objects.create(name="l")
        stats = Worker(models=[AtomicJob, Job], burst=True, handle_signals=False).run()
        assert stats.succeeded == 2
        assert set(AtomicJob.objects.values_list("queue_state", flat=True)) == {QueueState.SUCCEEDED}
        assert set(Job.objects.values_list("queue_state", flat=True)) == {QueueState.SUCCEEDED}
        # The test's transaction is still usable after the worker finished.
        assert Ledger.objects.count() == 2

    def test_run_queue_until_empty_is_the_helper_for_it(self) -> None:
        from django_dbqueue.testing import run_queue_until_empty

        Job.objects.create(name="h")
        AtomicJob.objects.create(name="h")
        assert run_queue_until_empty(Job, AtomicJob).succeeded == 2

    def test_runqueue_burst_runs_in_process_and_exits(self) -> None:
        Job.objects.create(name="c")
        call_command("runqueue", "testapp.Job", "--burst", verbosity=0)
        assert Job.objects.get().queue_state == QueueState.SUCCEEDED


# -- 7: an on_commit hook that raises -----------------------------------------------------------------


def _raising_hook(row: object) -> None:
    def hook() -> None:
        raise RuntimeError("hook exploded")

    transaction.on_commit(hook)


@pytest.mark.django_db(transaction=True)
def test_a_raising_on_commit_hook_keeps_the_job_done_and_the_worker_going(monkeypatch) -> None:
    monkeypatch.setitem(testapp.HANDLER_HOOKS, "boom", _raising_hook)
    AtomicJob.objects.bulk_create([AtomicJob(name="boom"), AtomicJob(name="ok"), AtomicJob(name="ok")])
    stats = Worker(models=[AtomicJob], burst=True, handle_signals=False, batch_size=3).run()
    assert stats.succeeded == 3
    assert set(AtomicJob.objects.values_list("queue_state", flat=True)) == {QueueState.SUCCEEDED}
    boom = AtomicJob.objects.get(name="boom")
    assert "on_commit() hook raised" in boom.queue_last_error and "hook exploded" in boom.queue_last_error


# -- 8, 9: save() behaves like a plain Django model -----------------------------------------------------


@pytest.mark.django_db
def test_copy_by_pk_none_inserts_a_new_row() -> None:
    ticket = Ticket.objects.create(subject="original")
    ticket.pk = None
    ticket._state.adding = True
    ticket.save()
    assert Ticket.objects.count() == 2


@pytest.mark.django_db
def test_copy_by_pk_none_without_adding_inserts_too() -> None:
    ticket = Ticket.objects.create(subject="original")
    ticket.pk = None
    ticket.save()
    assert Ticket.objects.count() == 2


@pytest.mark.django_db
def test_resaving_a_deleted_row_inserts_it_again() -> None:
    ticket = Ticket.objects.create(subject="gone")
    Ticket.objects.filter(pk=ticket.pk).delete()
    ticket.save()
    assert Ticket.objects.filter(pk=ticket.pk).exists()


@pytest.mark.django_db
def test_an_only_instance_saves_in_one_statement(django_assert_num_queries) -> None:
    Ticket.objects.create(subject="partial")
    row = Ticket.objects.only("subject").get()
    row.subject = "changed"
    with django_assert_num_queries(1):
        row.save()
    assert Ticket.objects.get().subject == "changed"


@pytest.mark.django_db
def test_a_new_rows_save_is_its_insert_alone_with_the_queue_times_read_back() -> None:
    # What QueueMixin adds to save() of a new row is its columns (issue #33: cProfile finds 5
    # calls per save over a model with the same fields and no mixin); the queue times come
    # back from the INSERT itself where the database returns columns (Django 6; 5.2 reads
    # them with one SELECT more).
    reads_back = django.VERSION >= (6, 0) and connection.features.can_return_columns_from_insert
    with CaptureQueriesContext(connection) as queries:
        ticket = Ticket(subject="new")
        ticket.save()
    sent = [q["sql"] for q in queries.captured_queries]
    assert sent[0].lstrip().upper().startswith("INSERT")
    assert len(sent) == (1 if reads_back else 2)
    stored = Ticket.objects.values("queue_run_at", "queue_enqueued_at").get(pk=ticket.pk)
    assert (ticket.queue_run_at, ticket.queue_enqueued_at) == (
        stored["queue_run_at"],
        stored["queue_enqueued_at"],
    )
    assert isinstance(ticket.queue_run_at, datetime)


@pytest.mark.django_db
def test_save_signals_get_update_fields_none() -> None:
    seen: list[object] = []

    def receiver(sender, update_fields, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(update_fields)

    ticket = Ticket.objects.create(subject="s")
    pre_save.connect(receiver, sender=Ticket)
    try:
        ticket.save()
    finally:
        pre_save.disconnect(receiver, sender=Ticket)
    assert seen == [None]


@pytest.mark.django_db
def test_a_model_form_saves_a_queue_field() -> None:
    ticket = Ticket.objects.create(subject="f")
    form_class = modelform_factory(Ticket, fields=["subject", "queue_priority"])
    form = form_class({"subject": "f", "queue_priority": 7}, instance=ticket)
    assert form.is_valid(), form.errors
    form.save()
    assert Ticket.objects.get().queue_priority == 7


@pytest.mark.django_db
def test_a_primary_key_set_by_a_pre_save_receiver_is_kept() -> None:
    def set_key(sender, instance, **kwargs):  # type: ignore[no-untyped-def]
        if instance.pk is None:
            instance.pk = 424242

    pre_save.connect(set_key, sender=Ticket)
    try:
        Ticket.objects.create(subject="keyed")
    finally:
        pre_save.disconnect(set_key, sender=Ticket)
    assert Ticket.objects.filter(pk=424242).exists()


# -- 16: first in, first out within a priority and due time -----------------------------------------


@pytest.mark.django_db
def test_rows_of_equal_priority_and_due_time_are_claimed_in_enqueue_order() -> None:
    from datetime import timedelta

    from django.utils import timezone

    due = timezone.now() - timedelta(seconds=5)
    enqueued = [
        TaskRecord.objects.create(
            task_path="tests.testapp.tasks.noop",
            queue_run_at=due,
            queue_enqueued_at=due + timedelta(microseconds=i),
        )
        for i in range(20)
    ]
    claimed = TaskRecord.objects.claim(limit=20)
    assert [row.pk for row in claimed] == [row.pk for row in enqueued]


# -- 18: a model without process() fails at once, with the reason ------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_model_without_process_fails_its_rows_at_once(monkeypatch) -> None:
    from django_dbqueue.models import QueueMixin

    # The handler QueueMixin itself provides, as a model without process() has it.
    monkeypatch.setitem(testapp.HANDLER_HOOKS, "none", QueueMixin.process)
    Job.objects.create(name="none")
    run(Job)
    row = Job.objects.get()
    assert row.queue_state == QueueState.FAILED and row.queue_attempts == 1
    assert "process() is not implemented" in row.queue_last_error
