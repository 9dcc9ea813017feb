"""``retry_on_lock_conflicts`` against real conflicts, and the claim's ``SKIP LOCKED``: a row
another session holds is skipped where the server has it; SQLite serialises writers instead."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.db import DatabaseError, OperationalError, connection, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.test import override_settings

from django_dbqueue.backends import retry_on_lock_conflicts
from django_dbqueue.backends.base import QueueBackend
from tests.testapp.models import Job, Ledger

from .conftest import KIND, begin, lock_row, only, short_lock_wait, table


class Contended:
    """A write to a row another session holds, counted; the holder can let go."""

    def __init__(self, holder: BaseDatabaseWrapper, pk: int) -> None:
        self.holder, self.pk, self.calls, self.errors = holder, pk, 0, []
        begin(holder)
        lock_row(holder, Ledger, pk)
        short_lock_wait(connection)

    def write(self) -> int:
        self.calls += 1
        try:
            with transaction.atomic():
                return Ledger.objects.filter(pk=self.pk).update(attempt=2)
        except OperationalError as exc:
            self.errors.append(exc)
            raise

    def release(self) -> None:
        self.holder.rollback()


def test_a_real_conflict_is_retried_and_then_succeeds(
    backend: QueueBackend, ledger: Callable[[int], list[int]], session: Callable[[], BaseDatabaseWrapper]
) -> None:
    (pk,) = ledger(1)
    contended = Contended(session(), pk)

    def write_then_let_go() -> int:
        try:
            return contended.write()
        finally:
            contended.release()  # after the first real conflict, the holder commits

    with override_settings(DBQUEUE_DEADLOCK_RETRIES=3):
        assert retry_on_lock_conflicts("default", write_then_let_go, "conformance write") == 1
    assert contended.calls == 2
    assert len(contended.errors) == 1 and backend.is_lock_conflict(contended.errors[0])
    assert Ledger.objects.get(pk=pk).attempt == 2


def test_it_gives_up_after_its_bound_with_the_error(
    backend: QueueBackend, ledger: Callable[[int], list[int]], session: Callable[[], BaseDatabaseWrapper]
) -> None:
    (pk,) = ledger(1)
    contended = Contended(session(), pk)
    try:
        with override_settings(DBQUEUE_DEADLOCK_RETRIES=1), pytest.raises(OperationalError) as raised:
            retry_on_lock_conflicts("default", contended.write, "conformance write")
    finally:
        contended.release()
    assert contended.calls == 2  # the first try and one retry
    assert raised.value is contended.errors[-1] and backend.is_lock_conflict(raised.value)
    assert Ledger.objects.get(pk=pk).attempt == 1


@only(
    "mysql",
    "postgresql",
    reason="SQLite's IMMEDIATE transaction takes the write lock at BEGIN: no conflict can come later",
)
def test_inside_a_callers_transaction_the_conflict_goes_up_at_once(
    backend: QueueBackend, ledger: Callable[[int], list[int]], session: Callable[[], BaseDatabaseWrapper]
) -> None:
    (pk,) = ledger(1)
    contended = Contended(session(), pk)
    try:
        # The caller's transaction is rolled back by the conflict: a retry cannot redo its work.
        with pytest.raises(OperationalError), transaction.atomic():
            retry_on_lock_conflicts("default", contended.write, "conformance write")
    finally:
        contended.release()
    assert contended.calls == 1


def test_other_errors_are_not_retried(backend: QueueBackend) -> None:
    calls = []

    def broken() -> None:
        calls.append(1)
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT conformance_no_such_column FROM {table(Ledger)}")

    with pytest.raises(DatabaseError):
        retry_on_lock_conflicts("default", broken, "conformance read")
    assert calls == [1]


@only("mysql", "postgresql", reason="SQLite has no SKIP LOCKED: one writer at a time (checked below)")
def test_the_claims_select_skips_a_row_another_session_holds(
    backend: QueueBackend, session: Callable[[], BaseDatabaseWrapper]
) -> None:
    held, free = (Job.objects.create(name=f"{KIND}{i}").pk for i in range(2))
    holder = session()
    begin(holder)
    lock_row(holder, Job, held)
    try:
        with transaction.atomic():
            candidates = [row[0] for row in Job.objects.claim_candidates(10)]
        assert candidates == [free]  # at once: skipped, not waited for
    finally:
        holder.rollback()
    with transaction.atomic():
        assert sorted(row[0] for row in Job.objects.claim_candidates(10)) == sorted([held, free])


@only("sqlite", reason="the servers' SKIP LOCKED is checked above")
def test_sqlite_serialises_a_second_writer(
    backend: QueueBackend, session: Callable[[], BaseDatabaseWrapper]
) -> None:
    # No row locks to skip: while one session writes, another writer waits for the whole
    # database (its busy timeout) and fails with the error is_lock_conflict retries.
    pk = Job.objects.create(name=KIND).pk
    holder = session()
    begin(holder)
    lock_row(holder, Job, pk)
    try:
        short_lock_wait(connection)
        with pytest.raises(OperationalError) as raised, transaction.atomic():
            list(Job.objects.claim_candidates(10))
    finally:
        holder.rollback()
    assert backend.is_lock_conflict(raised.value)
    # Once the other writer has committed, the claim takes the row.
    assert [job.pk for job in Job.objects.claim(1)] == [pk]
