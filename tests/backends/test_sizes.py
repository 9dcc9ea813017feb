"""``table_row_estimate``, ``plan_row_estimate`` and ``session_room``: the planner's cheap
answers where the server keeps them, None where it does not, never an error."""

from __future__ import annotations

from collections.abc import Callable

from django.db import connection
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.expressions import RawSQL

from django_dbqueue.backends.base import QueueBackend
from tests.testapp.models import Ledger

from .conftest import KIND, only, table, vendor

ROWS = 200


def analyze(model: type) -> None:
    with connection.cursor() as cursor:
        if vendor() == "mysql":
            cursor.execute(f"ANALYZE TABLE {table(model)}")
            cursor.fetchall()
        else:
            cursor.execute(f"ANALYZE {table(model)}")


@only("mysql", "postgresql", reason="SQLite keeps no row estimate (sqlite_stat1 is opt-in and coarse)")
def test_the_table_estimate_follows_the_statistics(
    backend: QueueBackend, ledger: Callable[[int], list[int]]
) -> None:
    ledger(ROWS)
    analyze(Ledger)
    estimate = backend.table_row_estimate(Ledger._meta.db_table)
    assert estimate is not None
    # An estimate, not a count: InnoDB samples pages; PostgreSQL's ANALYZE of a small table reads it all.
    assert ROWS / 2 <= estimate <= ROWS * 2, estimate


def test_an_unknown_table_has_no_estimate(backend: QueueBackend) -> None:
    assert backend.table_row_estimate("conformance_no_such_table") is None


@only("sqlite", reason="the servers' estimates are checked above")
def test_sqlite_has_no_estimates(backend: QueueBackend, ledger: Callable[[int], list[int]]) -> None:
    ledger(ROWS)
    analyze(Ledger)
    assert backend.table_row_estimate(Ledger._meta.db_table) is None
    assert backend.plan_row_estimate(Ledger.objects.filter(kind=KIND)) is None


@only("mysql", "postgresql", reason="SQLite's EXPLAIN gives no row counts")
def test_the_plan_estimate_of_a_queryset(backend: QueueBackend, ledger: Callable[[int], list[int]]) -> None:
    ledger(ROWS)
    analyze(Ledger)
    everything = backend.plan_row_estimate(Ledger.objects.filter(kind=KIND))
    assert everything is not None and ROWS / 4 <= everything <= ROWS * 4, everything
    one = backend.plan_row_estimate(Ledger.objects.filter(kind=KIND, job_id=7, attempt=1))
    assert one is not None and one <= 2, one  # the unique key: one row at most
    assert backend.plan_row_estimate(Ledger.objects.filter(kind="conformance_none")) is not None


def test_a_plan_that_fails_is_no_estimate_not_an_error(backend: QueueBackend) -> None:
    # A column that is not there: the database refuses the EXPLAIN.
    broken = Ledger.objects.annotate(missing=RawSQL("conformance_no_such_column", []))
    assert backend.plan_row_estimate(broken) is None


@only("mysql", "postgresql", reason="SQLite has no session limit")
def test_session_room_counts_sessions_against_the_servers_limit(
    backend: QueueBackend, session: Callable[[], BaseDatabaseWrapper]
) -> None:
    session()  # at least this one and ours are open
    room = backend.session_room()
    assert room is not None
    used, limit = room
    with connection.cursor() as cursor:
        cursor.execute("SELECT @@max_connections" if vendor() == "mysql" else "SHOW max_connections")
        assert limit == int(cursor.fetchone()[0])
    # The servers are shared: others come and go, so only the bounds are certain.
    assert 2 <= used <= limit + 10, room


@only("sqlite", reason="the servers' session counts are checked above")
def test_sqlite_has_no_session_limit(backend: QueueBackend) -> None:
    assert backend.session_room() is None
