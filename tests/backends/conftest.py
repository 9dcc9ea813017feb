"""Fixtures of the conformance suite: the backend under test, real extra sessions, and access to
the test database without a flush per test (each test removes the rows it wrote)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar

import pytest
from django.db import connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from django_dbqueue.backends import backend_for
from django_dbqueue.backends.base import QueueBackend
from tests.testapp.models import Job, Ledger

T = TypeVar("T")

#: The Ledger rows this suite writes (``kind``), removed after each test.
KIND = "conformance"


def vendor() -> str:
    return connection.vendor


def is_mariadb() -> bool:
    return vendor() == "mysql" and bool(getattr(connection, "mysql_is_mariadb", False))


def only(*vendors: str, reason: str) -> pytest.MarkDecorator:
    """Skip unless the database under test is one of ``vendors`` (``reason`` says why)."""
    import os

    url = os.environ.get("DATABASE_URL", "sqlite")
    running = (
        "sqlite" if url.startswith("sqlite") else "postgresql" if url.startswith("postgres") else "mysql"
    )
    return pytest.mark.skipif(running not in vendors, reason=reason)


@pytest.fixture
def db(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """The test database in autocommit, as a worker sees it: no transaction around the test, so
    a raw ``BEGIN`` and other sessions behave as in production.

    This replaces pytest-django's ``db`` (a transaction rolled back after the test) for this
    folder. Nor is it ``transactional_db``: emptying every table after each test cost more than
    the tests themselves on a loaded PostgreSQL. Each test writes only this suite's rows
    (``KIND``), removed here; the history table, which one test converts, is recreated by that
    test (test_partitioning.py)."""
    with django_db_blocker.unblock():
        try:
            yield
        finally:
            connection.close()  # session settings a test changed (and any open transaction) go
            Ledger.objects.filter(kind=KIND).delete()
            Job.objects.filter(name__startswith=KIND).delete()
            connection.close()


@pytest.fixture
def live_db(db: None) -> None:
    """The test database, as :func:`db` opens it (the name the tests ask for)."""


@pytest.fixture
def backend(live_db: None) -> QueueBackend:
    return backend_for("default")


def table(model: type) -> str:
    return connection.ops.quote_name(model._meta.db_table)


@pytest.fixture
def ledger(live_db: None) -> Callable[[int], list[int]]:
    """Commit ``n`` Ledger rows of this suite; return their pks."""

    def make(n: int) -> list[int]:
        rows = Ledger.objects.bulk_create(Ledger(kind=KIND, job_id=i, attempt=1) for i in range(n))
        if rows[0].pk is None:  # a backend that cannot return ids from a bulk insert
            return list(Ledger.objects.filter(kind=KIND).order_by("pk").values_list("pk", flat=True))
        return [row.pk for row in rows]

    return make


@pytest.fixture
def session(live_db: None) -> Iterator[Callable[[], BaseDatabaseWrapper]]:
    """Open real extra sessions to the test database (closed after the test)."""
    opened: list[BaseDatabaseWrapper] = []

    def open_session() -> BaseDatabaseWrapper:
        other = connections.create_connection("default")
        other.ensure_connection()
        opened.append(other)
        return other

    yield open_session
    for other in opened:
        other.close()


def in_thread(work: Callable[[], T]) -> Future[T]:
    """Run ``work`` on a thread of its own (which opens its own sessions); its result or error
    comes back through the future."""
    future: Future[T] = Future()

    def run() -> None:
        try:
            future.set_result(work())
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            future.set_exception(exc)

    threading.Thread(target=run, daemon=True).start()
    return future


def begin(wrapper: BaseDatabaseWrapper) -> None:
    """Open a transaction on ``wrapper`` the way a caller would (Django's own switch)."""
    wrapper.set_autocommit(False)


def lock_row(wrapper: BaseDatabaseWrapper, model: type, pk: int) -> None:
    """Take ``pk``'s row lock in ``wrapper``'s open transaction (on SQLite: the write lock)."""
    q = wrapper.ops.quote_name
    with wrapper.cursor() as cursor:
        if wrapper.vendor == "sqlite":
            cursor.execute(f"UPDATE {q(model._meta.db_table)} SET id = id WHERE id = %s", [pk])
        else:
            cursor.execute(f"SELECT id FROM {q(model._meta.db_table)} WHERE id = %s FOR UPDATE", [pk])


def short_lock_wait(wrapper: BaseDatabaseWrapper) -> None:
    """Make ``wrapper``'s session give up a lock wait quickly (each vendor's own setting)."""
    with wrapper.cursor() as cursor:
        if wrapper.vendor == "mysql":
            cursor.execute("SET SESSION innodb_lock_wait_timeout = 1")  # whole seconds, at least 1
        elif wrapper.vendor == "postgresql":
            cursor.execute("SET lock_timeout = '100ms'")
        else:
            cursor.execute("PRAGMA busy_timeout = 100")
