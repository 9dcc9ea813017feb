"""deferred_autocommit(): back-to-back transactions on MySQL/MariaDB without SET autocommit
round trips, and every Django promise about autocommit kept (checked from a second session)."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from django_dbqueue.autocommit import deferred_autocommit
from django_dbqueue.worker import Worker
from tests.testapp.models import AtomicJob, Ledger

pytestmark = pytest.mark.django_db(transaction=True)

mysql_only = pytest.mark.skipif(
    "connection.vendor != 'mysql'", reason="only MySQL switches modes by a statement"
)


def set_statements() -> int:
    """SET statements this session sent so far (mysqlclient's autocommit() is one)."""
    with connection.cursor() as cursor:
        cursor.execute("SHOW SESSION STATUS LIKE 'Com_set_option'")
        return int(cursor.fetchone()[1])


def ledger_rows_seen_by(other) -> int:
    with other.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM {Ledger._meta.db_table}")
        return cursor.fetchone()[0]


@mysql_only
def test_back_to_back_transactions_send_no_set_autocommit() -> None:
    connection.ensure_connection()
    before = set_statements()
    with deferred_autocommit("default"):
        for attempt in range(10):
            with transaction.atomic():
                Ledger.objects.create(kind="t", job_id=1, attempt=attempt)
    plain = set_statements() - before  # counts its own SHOW, as below
    before = set_statements()
    for attempt in range(10, 20):
        with transaction.atomic():
            Ledger.objects.create(kind="t", job_id=1, attempt=attempt)
    assert plain <= 2, plain  # at most the switch back at the end of the block
    assert set_statements() - before >= 20  # Django alone: off and on for each transaction


@mysql_only
def test_a_statement_outside_a_transaction_still_commits_by_itself(second_connection) -> None:
    with deferred_autocommit("default"):
        with transaction.atomic():
            Ledger.objects.create(kind="t", job_id=1, attempt=1)
        # The session is left out of autocommit after that commit; this INSERT must not
        # stay in an open transaction.
        Ledger.objects.create(kind="t", job_id=2, attempt=1)
        assert ledger_rows_seen_by(second_connection) == 2
        with transaction.atomic():
            Ledger.objects.create(kind="t", job_id=3, attempt=1)
            assert ledger_rows_seen_by(second_connection) == 2  # not committed yet
        assert ledger_rows_seen_by(second_connection) == 3
    assert connection.get_autocommit()
    Ledger.objects.create(kind="t", job_id=4, attempt=1)
    assert ledger_rows_seen_by(second_connection) == 4


@mysql_only
def test_rollbacks_and_on_commit_hooks_behave_as_without_it(second_connection) -> None:
    ran: list[int] = []
    with deferred_autocommit("default"):
        with pytest.raises(ZeroDivisionError), transaction.atomic():
            Ledger.objects.create(kind="t", job_id=1, attempt=1)
            transaction.on_commit(lambda: ran.append(1))
            1 / 0  # noqa: B018
        with transaction.atomic():
            Ledger.objects.create(kind="t", job_id=2, attempt=1)
            transaction.on_commit(lambda: ran.append(2))
        assert ran == [2]  # right after its commit, not at the end of the block
        assert ledger_rows_seen_by(second_connection) == 1


@mysql_only
def test_a_reconnect_inside_the_block_starts_in_autocommit(second_connection) -> None:
    with deferred_autocommit("default"):
        with transaction.atomic():
            Ledger.objects.create(kind="t", job_id=1, attempt=1)
        connection.close()  # e.g. the worker reconnecting after the server went away
        Ledger.objects.create(kind="t", job_id=2, attempt=1)
        assert ledger_rows_seen_by(second_connection) == 2


def test_an_atomic_worker_commits_every_job_with_it() -> None:
    """Every backend: the worker runs inside the block, and each job's effects are there."""
    AtomicJob.objects.bulk_create([AtomicJob(name=str(i)) for i in range(25)])
    stats = Worker(models=[AtomicJob], burst=True, handle_signals=False, batch_size=10).run()
    assert stats.succeeded == 25
    assert Ledger.objects.filter(kind="AtomicJob").count() == 25
    assert not AtomicJob.objects.exclude(queue_state="succeeded").exists()
