"""Deadlocks and lock-wait timeouts on outcome writes (found by the chaos suite).

On MariaDB, a worker's fenced outcome UPDATE can deadlock with an operator's bulk
``reprioritize()``/``retry_now()`` or a purge on the same table. DESIGN.md: "never lose or
double-run a row because of them". The error is injected through Django's
``connection.execute_wrapper`` (the statement is the real one; the database's answer is the
error each vendor gives for a deadlock), so the test is deterministic on every engine.
"""

from __future__ import annotations

import pytest
from django.db import OperationalError, connection

from django_dbqueue.states import QueueState
from django_dbqueue.worker import Worker
from tests.testapp.models import Job, Ledger

pytestmark = pytest.mark.django_db(transaction=True)


class _Sqlstate(Exception):
    sqlstate = "40P01"  # PostgreSQL: deadlock_detected


def deadlock_error() -> OperationalError:
    if connection.vendor == "mysql":
        return OperationalError(1213, "Deadlock found when trying to get lock; try restarting transaction")
    if connection.vendor == "sqlite":
        return OperationalError("database is locked")
    error = OperationalError("deadlock detected")
    error.__cause__ = _Sqlstate()
    return error


@pytest.mark.parametrize("outcome", [QueueState.SUCCEEDED, QueueState.READY], ids=["success", "failure"])
def test_a_deadlock_on_an_outcome_write_is_retried_not_turned_into_a_rerun(outcome) -> None:
    job = Job.objects.create(name="x", fail_times=1 if outcome == QueueState.READY else 0)
    injected: list[str] = []

    def deadlock_once(execute, sql, params, many, context):
        # On MariaDB a success's UPDATE travels with its history INSERT in one BEGIN NOT ATOMIC
        # block, its state written in the SQL text; elsewhere the state is a parameter.
        if (
            not injected
            and sql.startswith(("UPDATE", "BEGIN NOT ATOMIC UPDATE"))
            and (outcome in (params or ()) or f"= '{outcome}'" in sql)
        ):
            injected.append(sql)
            raise deadlock_error()
        return execute(sql, params, many, context)

    with connection.execute_wrapper(deadlock_once):
        stats = Worker(models=[Job], burst=True, handle_signals=False, max_jobs=1).run()
    assert injected, "the outcome UPDATE was not reached"
    job.refresh_from_db()
    assert job.queue_state == outcome and job.queue_attempts == 1
    assert stats.lost == 0
    # Not left RUNNING for its lease to expire and run it again.
    assert Ledger.objects.filter(job_id=job.pk).count() == 1
