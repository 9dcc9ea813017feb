"""``server_in_transaction`` (what the server says, whatever Django thinks) and
``bound_idle_transactions`` (the server really ends a session idle inside a transaction)."""

from __future__ import annotations

import time
from collections.abc import Callable

from django.db import DatabaseError, connection, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from django_dbqueue.backends.base import QueueBackend
from tests.conftest import wait_until
from tests.testapp.models import Ledger

from .conftest import begin, is_mariadb, lock_row, only, table, vendor


def test_a_raw_begin_is_a_transaction_on_the_server(backend: QueueBackend) -> None:
    connection.ensure_connection()
    assert backend.server_in_transaction() is False
    with connection.cursor() as cursor:
        # Sent by a handler behind Django's back: Django still thinks it is in autocommit.
        cursor.execute("BEGIN")
        cursor.execute(f"SELECT COUNT(*) FROM {table(Ledger)}")
        assert not connection.in_atomic_block
        assert backend.server_in_transaction() is True
        cursor.execute("COMMIT")
    assert backend.server_in_transaction() is False


def test_a_begin_with_no_statement_yet_is_a_transaction(backend: QueueBackend) -> None:
    # MariaDB's @@in_transaction and PostgreSQL's transaction status both count a BEGIN that
    # has run nothing yet; SQLite's BEGIN is DEFERRED but the library reports it all the same.
    with connection.cursor() as cursor:
        cursor.execute("BEGIN")
        try:
            assert backend.server_in_transaction() is True
        finally:
            cursor.execute("ROLLBACK")
    assert backend.server_in_transaction() is False


def test_djangos_own_transaction_is_one_too(backend: QueueBackend) -> None:
    with transaction.atomic():
        Ledger.objects.exists()
        assert backend.server_in_transaction() is True
    assert backend.server_in_transaction() is False


def test_before_the_first_connection_there_is_none(backend: QueueBackend) -> None:
    connection.close()
    assert backend.server_in_transaction() is False
    if vendor() != "mysql":
        # The client tracks the state: asking opened no session (MariaDB asks the server).
        assert connection.connection is None


def idle_bound(wrapper: BaseDatabaseWrapper) -> str:
    with wrapper.cursor() as cursor:
        if wrapper.vendor == "mysql":
            cursor.execute("SELECT @@SESSION.idle_transaction_timeout")
        else:
            cursor.execute("SHOW idle_in_transaction_session_timeout")
        return str(cursor.fetchone()[0])


@only("mysql", "postgresql", reason="SQLite is a file on the workers' host: no network can strand a lock")
def test_the_idle_transaction_bound_is_set_on_the_session(
    backend: QueueBackend, session: Callable[[], BaseDatabaseWrapper]
) -> None:
    own = session()
    if vendor() == "mysql" and not is_mariadb():
        assert backend.bound_idle_transactions(own, 0.2) is False  # MySQL 8 has no such bound
        return
    assert backend.bound_idle_transactions(own, 0.2) is True
    # Rounded up to the server's unit: whole seconds on MariaDB, milliseconds on PostgreSQL.
    assert idle_bound(own) == ("1" if vendor() == "mysql" else "200ms")
    assert backend.bound_idle_transactions(own, 2.5) is True
    assert idle_bound(own) == ("3" if vendor() == "mysql" else "2500ms")
    assert idle_bound(connection) in ("0", "0ms", "0s", "0.000000")  # only that session


@only("mysql", "postgresql", reason="SQLite is a file on the workers' host: no network can strand a lock")
def test_an_idle_transaction_is_ended_after_the_bound_and_its_lock_freed(
    backend: QueueBackend, ledger: Callable[[int], list[int]], session: Callable[[], BaseDatabaseWrapper]
) -> None:
    if vendor() == "mysql" and not is_mariadb():
        return  # MySQL 8: no bound (asserted above)
    (pk,) = ledger(1)
    stranded = session()
    assert backend.bound_idle_transactions(stranded, 0.2)
    begin(stranded)
    lock_row(stranded, Ledger, pk)
    started = time.monotonic()

    def lock_is_free() -> bool:
        with transaction.atomic():
            return Ledger.objects.select_for_update(skip_locked=True).filter(pk=pk).exists()

    assert not lock_is_free()
    # The session sits idle holding the lock; the server ends it after the bound.
    assert wait_until(lock_is_free, timeout=15, interval=0.05)
    assert time.monotonic() - started >= 0.15
    try:
        with stranded.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError:
        pass  # the session is gone: its transaction was rolled back with it
    else:
        raise AssertionError("the stranded session still answers")
    finally:
        stranded.close()


@only("sqlite", reason="the server-side bound is checked on the servers that have one")
def test_sqlite_needs_no_bound(backend: QueueBackend, session: Callable[[], BaseDatabaseWrapper]) -> None:
    assert backend.bound_idle_transactions(session(), 0.2) is True
