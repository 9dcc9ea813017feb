"""The claim protocol and fenced outcomes, on a real database."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_dbqueue.backends import DbNow
from django_dbqueue.exceptions import LeaseLost
from django_dbqueue.states import QueueState
from tests.conftest import skip_on_sqlite
from tests.testapp.models import Job, Ticket

pytestmark = pytest.mark.django_db(transaction=True)


def make_jobs(n: int, **fields) -> list[Job]:
    return Job.objects.bulk_create([Job(name=str(i), **fields) for i in range(n)])


def test_new_rows_are_ready_and_due() -> None:
    job = Job.objects.create(name="a")
    assert job.queue_state == QueueState.READY
    assert list(Job.objects.ready()) == [job]


def test_claim_orders_by_priority_then_run_at_and_marks_running() -> None:
    low = Job.objects.create(name="low")
    high = Job.objects.create(name="high", queue_priority=10)
    later = Job.objects.create(name="later", queue_run_at=timezone.now() + timedelta(hours=1))
    rows = Job.objects.claim(limit=5, worker_id="w1", lease=60)
    assert [r.pk for r in rows] == [high.pk, low.pk]  # not the future one
    for row in rows:
        row.refresh_from_db()
        assert row.queue_state == QueueState.RUNNING
        assert row.queue_attempts == 1
        assert row.queue_locked_by == "w1"
        assert row.queue_token is not None
        assert row.queue_locked_until > row.queue_last_attempt_at
    assert rows[0].queue_token == rows[1].queue_token  # one claim, one token
    assert Job.objects.get(pk=later.pk).queue_state == QueueState.READY
    assert Job.objects.claim(limit=5) == []


def test_claim_respects_the_callers_filters_and_custom_querysets() -> None:
    Ticket.objects.create(subject="meh", queue_priority=1)
    urgent = Ticket.objects.create(subject="fire", queue_priority=50)
    rows = Ticket.objects.urgent().claim(limit=10)
    assert [r.pk for r in rows] == [urgent.pk]


def test_claim_lease_is_on_the_database_clock() -> None:
    make_jobs(1)
    [row] = Job.objects.claim(lease=timedelta(seconds=120))
    db_now = Job.objects.annotate(n=DbNow()).values_list("n", flat=True)[0]
    remaining = (row.queue_locked_until - db_now).total_seconds()
    assert 100 < remaining <= 120


@pytest.mark.parametrize("bad", [0, -3, 1.5, "2", None])
def test_claim_refuses_a_bad_limit(bad) -> None:
    with pytest.raises((ValueError, TypeError)):
        Job.objects.claim(limit=bad)


def test_claim_refuses_a_bad_lease() -> None:
    with pytest.raises(ValueError):
        Job.objects.claim(lease=0)
    with pytest.raises(TypeError):
        Job.objects.claim(lease="soon")


def test_outcomes_are_fenced_by_the_claim_token() -> None:
    make_jobs(1)
    [first] = Job.objects.claim(lease=60)
    # The lease "expires" (as if the worker stalled) and a rescuer gives the row back.
    Job.objects.filter(pk=first.pk).update(queue_locked_until=timezone.now() - timedelta(seconds=1))
    assert Job.objects.rescue_expired() == 1
    [second] = Job.objects.claim(lease=60)
    assert second.pk == first.pk and second.queue_token != first.queue_token
    with pytest.raises(LeaseLost):
        first.mark_succeeded()
    with pytest.raises(LeaseLost):
        first.mark_failed("late")
    with pytest.raises(LeaseLost):
        first.release()
    with pytest.raises(LeaseLost):
        first.renew_lease()
    row = Job.objects.get(pk=first.pk)
    assert (row.queue_state, row.queue_token, row.queue_attempts) == (
        QueueState.RUNNING,
        second.queue_token,
        2,
    )
    second.mark_succeeded()
    row.refresh_from_db()
    assert row.queue_state == QueueState.SUCCEEDED and row.queue_finished_at is not None
    with pytest.raises(LeaseLost):  # a duplicate outcome is rejected too
        second.mark_succeeded()


def test_late_outcome_is_logged(caplog) -> None:
    make_jobs(1)
    [row] = Job.objects.claim(lease=60)
    Job.objects.filter(pk=row.pk).update(queue_token=None, queue_state=QueueState.READY)
    with caplog.at_level("WARNING", logger="django_dbqueue"), pytest.raises(LeaseLost):
        row.mark_failed("too late")
    assert "late outcome rejected" in caplog.text


def test_mark_failed_applies_the_retry_policy_then_ends_failed() -> None:
    make_jobs(1)
    for attempt in (1, 2):
        [row] = Job.objects.claim()
        retry_at = row.mark_failed(ValueError(f"boom {attempt}"))
        assert retry_at is not None
        db = Job.objects.get(pk=row.pk)
        assert db.queue_state == QueueState.READY and db.queue_attempts == attempt
        assert "ValueError: boom" in db.queue_last_error and "Traceback" not in db.queue_last_error
        Job.objects.filter(pk=row.pk).update(queue_run_at=timezone.now())
    [row] = Job.objects.claim()
    try:
        raise ValueError("third")
    except ValueError as exc:
        assert row.mark_failed(exc) is None
    db = Job.objects.get(pk=row.pk)
    assert db.queue_state == QueueState.FAILED and db.queue_attempts == 3
    assert (
        "Traceback (most recent call last)" in db.queue_last_error
        and "ValueError: third" in db.queue_last_error
    )


def test_release_gives_back_without_counting_the_attempt() -> None:
    make_jobs(1)
    [row] = Job.objects.claim()
    row.release()
    db = Job.objects.get(pk=row.pk)
    assert (db.queue_state, db.queue_attempts, db.queue_token) == (QueueState.READY, 0, None)


def test_renew_lease_extends_it() -> None:
    make_jobs(1)
    [row] = Job.objects.claim(lease=5)
    before = Job.objects.get(pk=row.pk).queue_locked_until
    row._queue_claim.lease = timedelta(seconds=600)
    row.renew_lease()
    assert Job.objects.get(pk=row.pk).queue_locked_until > before + timedelta(seconds=500)


def test_rescue_returns_expired_rows_and_fails_exhausted_ones() -> None:
    jobs = make_jobs(3)
    rows = [Job.objects.claim(limit=1, lease=60)[0] for _ in jobs]  # each alone in its claim
    Job.objects.filter(pk=jobs[2].pk).update(queue_attempts=3)  # the policy allows 3
    Job.objects.filter(pk__in=[jobs[1].pk, jobs[2].pk]).update(
        queue_locked_until=timezone.now() - timedelta(seconds=5)
    )
    assert Job.objects.rescue_expired() == 2
    states = dict(Job.objects.values_list("pk", "queue_state"))
    assert states == {jobs[0].pk: "running", jobs[1].pk: "ready", jobs[2].pk: "failed"}
    assert "lease expired" in Job.objects.get(pk=jobs[2].pk).queue_last_error
    assert Job.objects.get(pk=jobs[1].pk).queue_attempts == 1  # charged: it was running
    assert len(rows) == 3


def test_rows_of_a_claim_that_expired_together_come_back_to_run_alone() -> None:
    jobs = make_jobs(4)
    Job.objects.claim(limit=4, lease=60)
    Job.objects.update(queue_attempts=3)  # the policy allows 3: not failed for a batch's crash
    Job.objects.update(queue_locked_until=timezone.now() - timedelta(seconds=5))
    assert Job.objects.rescue_expired() == 4
    assert set(Job.objects.values_list("queue_state", "queue_attempts")) == {("ready", 3)}
    # Each is claimed alone from now on, whatever the claim's limit.
    assert [len(Job.objects.claim(limit=10)) for _ in jobs] == [1, 1, 1, 1]
    # ... and a crash while it runs alone is its own: on its last attempt, it ends FAILED.
    Job.objects.update(queue_locked_until=timezone.now() - timedelta(seconds=5))
    assert Job.objects.rescue_expired() == 4
    assert set(Job.objects.values_list("queue_state", "queue_attempts")) == {("failed", 4)}


class one_data_statement:  # noqa: N801 - reads as a context manager
    """Exactly one statement touching rows (PostgreSQL's wake-up NOTIFY aside); with
    ``composition_read``, after one SELECT that locks the rows in a batch or with dependants
    (``cancel()`` tells them in its transaction: docs/composition.md)."""

    def __init__(self, composition_read: bool = False) -> None:
        self.composition_read = composition_read

    def __enter__(self):
        self.queries = CaptureQueriesContext(connection)
        self.queries.__enter__()
        return self

    def __exit__(self, *exc):
        self.queries.__exit__(*exc)
        statements = [q["sql"] for q in self.queries.captured_queries if "pg_notify" not in q["sql"]]
        if self.composition_read:  # in a transaction of its own (SQLite shows BEGIN, COMMIT)
            statements = [q for q in statements if q.split()[0] not in ("BEGIN", "COMMIT")]
            assert statements[0].startswith("SELECT") and "queue_dependants" in statements[0], statements
            statements = statements[1:]
        assert len(statements) == 1, statements
        assert statements[0].startswith("UPDATE"), statements


def test_bulk_operations_are_one_update_and_spare_running_rows() -> None:
    jobs = make_jobs(4)
    [running] = Job.objects.claim()
    Job.objects.filter(pk=jobs[3].pk).update(queue_state=QueueState.FAILED, queue_attempts=3)
    with one_data_statement():
        assert Job.objects.all().reprioritize(7) == 3
    assert Job.objects.get(pk=running.pk).queue_priority == 0
    with one_data_statement():
        assert Job.objects.all().reschedule(timedelta(hours=2)) == 2  # READY rows only
    with one_data_statement():
        assert Job.objects.all().retry_now() == 3  # the 2 READY + the FAILED one
    failed = Job.objects.get(pk=jobs[3].pk)
    assert failed.queue_state == QueueState.READY and failed.queue_attempts == 0
    with one_data_statement(composition_read=True):
        assert Job.objects.all().cancel() == 3
    with one_data_statement():
        assert Job.objects.all().enqueue(priority=3) == 3
    assert Job.objects.get(pk=running.pk).queue_state == QueueState.RUNNING
    assert Job.objects.ready().count() == 3


def test_enqueue_in_the_future_on_the_database_clock() -> None:
    job = Job.objects.create(name="x", queue_state=QueueState.IDLE)
    assert not Job.objects.ready().exists()
    assert job.enqueue(run_at=timedelta(hours=1), priority=4)
    assert job.queue_state == QueueState.READY and job.queue_priority == 4
    assert not Job.objects.ready().exists()
    assert Job.objects.filter(pk=job.pk).reschedule(timezone.now() - timedelta(seconds=1)) == 1
    assert Job.objects.ready().count() == 1


def test_bulk_operations_validate_their_arguments() -> None:
    with pytest.raises(TypeError):
        Job.objects.all().reprioritize("high")
    with pytest.raises(ValueError):
        Job.objects.all().reschedule(timezone.now().replace(tzinfo=None))
    with pytest.raises(ValueError):
        Job.objects.all().reschedule(None)


@skip_on_sqlite
def test_claim_skips_rows_locked_by_another_connection(second_connection) -> None:
    jobs = make_jobs(5)
    table = connection.ops.quote_name(Job._meta.db_table)
    locked = [jobs[0].pk, jobs[1].pk]
    with second_connection.cursor() as cursor:
        second_connection.set_autocommit(False)
        # One primary-key equality each: `id IN (...)` on a 5-row table may be served by a
        # scan of the state index, and MariaDB then X-locks every entry it read.
        for pk in locked:
            cursor.execute(f"SELECT id FROM {table} WHERE id = %s FOR UPDATE", [pk])
        try:
            rows = Job.objects.claim(limit=10)
        finally:
            second_connection.rollback()
            second_connection.set_autocommit(True)
    assert sorted(r.pk for r in rows) == sorted(j.pk for j in jobs[2:])


@skip_on_sqlite
def test_concurrent_claimers_never_share_a_row() -> None:
    make_jobs(600)
    claimed: list[list[int]] = [[] for _ in range(6)]
    errors: list[BaseException] = []

    def claimer(slot: int) -> None:
        try:
            while rows := Job.objects.claim(limit=7, worker_id=f"t{slot}"):
                claimed[slot].extend(r.pk for r in rows)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    every = [pk for part in claimed for pk in part]
    assert len(every) == 600 and len(set(every)) == 600
    assert sum(1 for part in claimed if part) >= 2  # really concurrent


def test_bulk_enqueue_inserts_ready_rows() -> None:
    rows = [Job(name=str(i), queue_state=QueueState.IDLE) for i in range(2500)]
    assert Job.objects.bulk_enqueue(rows, batch_size=1000) == 2500
    assert Job.objects.ready().count() == 2500
    assert sorted(int(n) for n in Job.objects.values_list("name", flat=True)) == list(range(2500))


def test_bulk_enqueue_writes_what_bulk_create_writes() -> None:
    """bulk_enqueue() prepares each distinct value once and writes the INSERT itself: the
    rows must read back exactly as the ORM's bulk_create() writes them."""
    due = timezone.now().replace(microsecond=123456) - timedelta(minutes=5)

    def specs(tag: str) -> list[Ticket]:
        return [
            Ticket(
                subject=f"{tag}-{i % 7}",
                customer=i % 3,
                handled=bool(i % 2),
                queue_priority=i % 4 - 1,
                queue_run_at=due + timedelta(seconds=i % 5),
            )
            for i in range(60)
        ]

    Ticket.objects.bulk_create(specs("orm"))
    assert Ticket.objects.bulk_enqueue(specs("ours"), batch_size=25) == 60
    fields = [
        "subject",
        "customer",
        "handled",
        "queue_priority",
        "queue_run_at",
        "queue_state",
        "queue_attempts",
        "queue_token",
        "queue_locked_by",
        "queue_last_error",
    ]

    def rows(tag: str) -> list[tuple]:
        found = Ticket.objects.filter(subject__startswith=f"{tag}-").order_by("id").values_list(*fields)
        return [(subject.split("-", 1)[1], *rest) for subject, *rest in found]

    assert rows("ours") == rows("orm") and len(rows("orm")) == 60


def test_bulk_enqueue_takes_expressions_through_the_orm() -> None:
    rows = [Job(name=str(i), queue_run_at=DbNow()) for i in range(3)]
    assert Job.objects.bulk_enqueue(rows) == 3
    assert Job.objects.ready().count() == 3


def test_bulk_enqueue_checks_its_input() -> None:
    with pytest.raises(TypeError):
        Job.objects.bulk_enqueue([Ticket(subject="x")])
    with pytest.raises(ValueError):
        Job.objects.bulk_enqueue([Job()], batch_size=0)
    assert not Job.objects.exists()
