"""LazySavepoint: grouped atomic handlers pay a SAVEPOINT only if they touch the database, and a
failing one rolls back alone, its on_commit() hooks included."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from django_dbqueue.savepoint import LazySavepoint
from tests.test_worker import drain_until_settled, runs
from tests.testapp.models import COMMITTED_HOOKS, GroupedAtomicJob, Ledger

pytestmark = pytest.mark.django_db(transaction=True)


def savepoint_statements(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if "SAVEPOINT" in q["sql"].upper()]


def test_a_block_without_statements_sends_no_savepoint() -> None:
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        with LazySavepoint("default") as savepoint:
            pass
        savepoint.rollback()  # nothing to undo
    assert savepoint.sid is None and savepoint_statements(queries) == []


def test_the_savepoint_comes_before_the_first_statement_and_rolls_it_back() -> None:
    with transaction.atomic():
        Ledger.objects.create(kind="kept", job_id=1, attempt=1)
        with CaptureQueriesContext(connection) as queries:
            with LazySavepoint("default") as savepoint:
                Ledger.objects.create(kind="undone", job_id=2, attempt=1)
                with transaction.atomic():  # a handler's own nested atomic still works
                    Ledger.objects.create(kind="undone", job_id=3, attempt=1)
            savepoint.rollback()
        sql = [q["sql"] for q in queries.captured_queries]
        assert sql[0].upper().startswith("SAVEPOINT") and "INSERT" in sql[1].upper()
        # One SAVEPOINT of ours (never released: the commit ends it), the nested atomic's pair,
        # and the rollback to ours.
        assert len(savepoint_statements(queries)) == 4
    assert list(Ledger.objects.values_list("kind", flat=True)) == ["kept"]


def test_rollback_drops_the_on_commit_hooks_registered_inside() -> None:
    ran: list[str] = []
    with transaction.atomic():
        transaction.on_commit(lambda: ran.append("before"))
        with LazySavepoint("default") as failed:
            transaction.on_commit(lambda: ran.append("failed, before any statement"))
            Ledger.objects.create(kind="undone", job_id=1, attempt=1)
            transaction.on_commit(lambda: ran.append("failed, after a statement"))
        failed.rollback()
        with LazySavepoint("default"):
            transaction.on_commit(lambda: ran.append("succeeded"))
    assert ran == ["before", "succeeded"]


def test_grouped_atomic_mode_runs_only_the_hooks_of_handlers_that_succeeded() -> None:
    COMMITTED_HOOKS.clear()
    GroupedAtomicJob.objects.bulk_create(
        [GroupedAtomicJob(name=str(i), action="hook", fail_times=99 if i % 4 == 0 else 0) for i in range(20)]
    )
    drain_until_settled(GroupedAtomicJob)
    succeeded = set(GroupedAtomicJob.objects.filter(queue_state="succeeded").values_list("pk", flat=True))
    assert len(succeeded) == 15
    assert sorted(COMMITTED_HOOKS) == sorted(succeeded)  # once each, none of a failed attempt
    assert set(runs(GroupedAtomicJob)) == succeeded  # the failed attempts' ledger rows rolled back
