"""``is_lock_conflict`` and ``is_read_only``: each recognises the error the server really raises
for that event (a deadlock between two sessions, a lock-wait timeout, a write refused by a
read-only session), and nothing else."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from django.db import DatabaseError, IntegrityError, connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from django_dbqueue.backends.base import QueueBackend
from tests.testapp.models import Ledger

from .conftest import KIND, begin, in_thread, lock_row, only, short_lock_wait, table


def raised(work: Callable[[], object]) -> BaseException:
    try:
        work()
    except DatabaseError as exc:
        return exc
    raise AssertionError("no error was raised")


@only("mysql", "postgresql", reason="SQLite has no row locks: one writer at a time, no deadlock")
def test_a_real_deadlock_is_a_lock_conflict(
    backend: QueueBackend, ledger: Callable[[int], list[int]]
) -> None:
    first, second = ledger(2)
    both_hold_one = threading.Barrier(2, timeout=30)

    def lock_in_order(a: int, b: int) -> BaseException | None:
        # Each thread opens its own session (Django's connections belong to one thread).
        own = connections.create_connection("default")
        try:
            if own.vendor == "postgresql":
                try:
                    with own.cursor() as cursor:  # detect it in 100 ms, not the default second
                        cursor.execute("SET deadlock_timeout = '100ms'")
                except DatabaseError:
                    pass  # a superuser's setting: without it the server takes its default second
            begin(own)
            lock_row(own, Ledger, a)
            both_hold_one.wait()
            lock_row(own, Ledger, b)
            return None
        except DatabaseError as exc:
            return exc
        finally:
            own.rollback()  # the victim's rollback lets the survivor take its second row
            own.close()

    outcomes = [
        in_thread(lambda: lock_in_order(first, second)),
        in_thread(lambda: lock_in_order(second, first)),
    ]
    errors = [error for error in (future.result(timeout=60) for future in outcomes) if error is not None]
    assert len(errors) == 1, errors  # one victim, chosen by the server
    assert backend.is_lock_conflict(errors[0]), repr(errors[0])


def test_a_lock_wait_timeout_is_a_lock_conflict(
    backend: QueueBackend, ledger: Callable[[int], list[int]], session: Callable[[], BaseDatabaseWrapper]
) -> None:
    (pk,) = ledger(1)
    holder = session()
    begin(holder)
    lock_row(holder, Ledger, pk)
    try:
        waiter = session()
        short_lock_wait(waiter)
        begin(waiter)
        error = raised(lambda: lock_row(waiter, Ledger, pk))
        waiter.rollback()
    finally:
        holder.rollback()
    assert backend.is_lock_conflict(error), repr(error)
    assert not backend.is_read_only(error)


def test_unrelated_errors_are_not_lock_conflicts(backend: QueueBackend) -> None:
    Ledger.objects.create(kind=KIND, job_id=1, attempt=1)
    duplicate = raised(lambda: Ledger.objects.create(kind=KIND, job_id=1, attempt=1))
    assert isinstance(duplicate, IntegrityError)
    with connection.cursor() as cursor:
        missing = raised(lambda: cursor.execute("SELECT no_such_column FROM " + table(Ledger)))
    for error in (duplicate, missing, ValueError("deadlock"), DatabaseError("no such table: elsewhere")):
        assert not backend.is_lock_conflict(error), repr(error)
        assert not backend.is_read_only(error), repr(error)


@only("mysql", "postgresql", reason="SQLite has no read-only server mode: a file is writable or not")
def test_a_write_refused_by_a_read_only_session_is_read_only(
    backend: QueueBackend, session: Callable[[], BaseDatabaseWrapper]
) -> None:
    own = session()
    with own.cursor() as cursor:
        if own.vendor == "mysql":
            cursor.execute("SET SESSION TRANSACTION READ ONLY")
        else:
            cursor.execute("SET default_transaction_read_only = on")
        error = raised(
            lambda: cursor.execute(
                f"INSERT INTO {table(Ledger)} (kind, job_id, attempt, pid) VALUES (%s, 1, 1, 1)", [KIND]
            )
        )
    assert backend.is_read_only(error), repr(error)
    assert not backend.is_lock_conflict(error)
    assert not Ledger.objects.exists()


@only("sqlite", reason="the vendor's own read-only answer is checked above")
def test_sqlite_never_answers_read_only(
    backend: QueueBackend, session: Callable[[], BaseDatabaseWrapper]
) -> None:
    # A worker that sees "read only" waits and reconnects; a SQLite file that refuses writes
    # (query_only, file permissions) is a configuration error that waiting never fixes.
    own = session()
    with own.cursor() as cursor:
        cursor.execute("PRAGMA query_only = ON")
        error = raised(
            lambda: cursor.execute(
                f"INSERT INTO {table(Ledger)} (kind, job_id, attempt, pid) VALUES (%s, 1, 1, 1)", [KIND]
            )
        )
    assert "readonly" in str(error)
    assert not backend.is_read_only(error)
    assert not backend.is_lock_conflict(error)


@pytest.mark.parametrize("code", [1205, 1213])
@only("mysql", reason="MySQL error codes")
def test_mysql_codes_are_read_from_either_driver(backend: QueueBackend, code: int) -> None:
    # mysqlclient's args are (code, message); MySQL Connector/Python's errors carry errno.
    assert backend.is_lock_conflict(DatabaseError(code, "message"))
    by_errno = DatabaseError("message")
    by_errno.errno = code  # type: ignore[attr-defined]
    assert backend.is_lock_conflict(by_errno)
