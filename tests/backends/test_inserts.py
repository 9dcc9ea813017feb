"""``insert_new``: rows a unique constraint already holds are skipped atomically, and the count is
the rows the database inserted, read from the statements' own row counts."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.db import connection
from django.db.backends.base.base import BaseDatabaseWrapper
from django.test.utils import CaptureQueriesContext

from django_dbqueue.backends import insert_new
from django_dbqueue.backends.base import QueueBackend
from tests.conftest import wait_until
from tests.testapp.models import Ledger

from .conftest import KIND, begin, in_thread, only, table


def rows(*job_ids: int) -> list[Ledger]:
    return [Ledger(kind=KIND, job_id=job_id, attempt=1) for job_id in job_ids]


def stored() -> list[int]:
    return sorted(Ledger.objects.filter(kind=KIND).values_list("job_id", flat=True))


def test_all_new_rows_are_counted(backend: QueueBackend) -> None:
    assert insert_new(Ledger, "default", rows(1, 2, 3)) == 3
    assert stored() == [1, 2, 3]


def test_only_the_rows_inserted_are_counted_when_some_keys_exist(backend: QueueBackend) -> None:
    insert_new(Ledger, "default", rows(2, 4))
    assert insert_new(Ledger, "default", rows(1, 2, 3, 4, 5)) == 3
    assert stored() == [1, 2, 3, 4, 5]
    assert insert_new(Ledger, "default", rows(1, 5)) == 0  # nothing new: nothing counted, no error


def test_counts_add_up_over_batches(backend: QueueBackend) -> None:
    insert_new(Ledger, "default", rows(3, 7))
    with CaptureQueriesContext(connection) as statements:
        assert insert_new(Ledger, "default", rows(*range(10)), batch_size=3) == 8
    inserts = [s for s in statements.captured_queries if s["sql"].lstrip().upper().startswith("INSERT")]
    assert len(inserts) == 4  # 3 + 3 + 3 + 1, each counted on its own
    assert stored() == list(range(10))


def test_the_statements_stay_the_orms_own(backend: QueueBackend) -> None:
    # The count is read by an execute wrapper: the statement is bulk_create's, seen by every
    # other wrapper and by assertNumQueries, and the wrapper is gone afterwards.
    seen: list[str] = []
    connection.ensure_connection()  # the session's own set-up statements are not ours

    def outer(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(outer):
        assert insert_new(Ledger, "default", rows(1, 2)) == 2
    # Django 5.2's SQLite backend opens bulk_create's transaction with a statement of its own
    # (BEGIN IMMEDIATE under transaction_mode): that one is Django's, not a second INSERT.
    ours = [sql for sql in seen if not sql.lstrip().upper().startswith("BEGIN")]
    assert len(ours) == 1 and ours[0].lstrip().upper().startswith("INSERT")
    assert connection.execute_wrappers == []


def test_an_empty_list_inserts_nothing(backend: QueueBackend) -> None:
    assert insert_new(Ledger, "default", []) == 0


def waiting_for_a_lock() -> bool:
    """Whether a session of this test database is waiting for a row lock (the servers are shared:
    only sessions on this database count)."""
    with connection.cursor() as cursor:
        if connection.vendor == "mysql":
            cursor.execute(
                "SELECT COUNT(*) FROM information_schema.innodb_trx t JOIN information_schema.processlist p "
                "ON p.id = t.trx_mysql_thread_id WHERE t.trx_state = 'LOCK WAIT' AND p.db = DATABASE()"
            )
        else:
            cursor.execute(
                "SELECT COUNT(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
        return bool(cursor.fetchone()[0])


@pytest.mark.parametrize("first_caller", ["commits", "rolls back"])
@only("mysql", "postgresql", reason="SQLite has one writer: a racing insert waits for the whole database")
def test_a_racing_callers_row_is_counted_by_whoever_inserted_it(
    backend: QueueBackend, session: Callable[[], BaseDatabaseWrapper], first_caller: str
) -> None:
    other = session()
    begin(other)
    with other.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table(Ledger)} (kind, job_id, attempt, pid) VALUES (%s, 1, 1, 0)", [KIND]
        )

    def insert_in_own_session() -> int:
        try:
            return insert_new(Ledger, "default", rows(1, 2))
        finally:
            connection.close()  # this thread's own session

    racing = in_thread(insert_in_own_session)
    try:
        # The unique key makes our insert wait for the other caller's transaction.
        # Polled at 0.2 s: InnoDB refreshes its INNODB_TRX cache only after 0.1 s without a
        # read, so a faster poll would read the first answer for ever.
        assert wait_until(waiting_for_a_lock, timeout=15, interval=0.2), racing.done()
    finally:
        other.commit() if first_caller == "commits" else other.rollback()
    assert racing.result(timeout=15) == (1 if first_caller == "commits" else 2)
    assert stored() == [1, 2]
    pids = dict(Ledger.objects.filter(kind=KIND).values_list("job_id", "pid"))
    assert (pids[1] == 0) is (first_caller == "commits")
