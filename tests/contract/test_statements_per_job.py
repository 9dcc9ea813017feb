"""The statements a worker sends per job: a count contract, so the speed of the per-job path
cannot regress silently (issue #33). Counted with ``connection.execute_wrapper()``, the way
debug-toolbar, Sentry or ``assertNumQueries`` see them; no timing.

Each case drains two claims of different sizes of the same model with one worker and compares
their statement counts: what a claim costs whatever its size (the claim itself, the worker's
start and stop) cancels out, and the difference divided by the difference in jobs is what one
more job costs.
"""

from __future__ import annotations

import collections
from typing import Any

import pytest
from django.db import connection

from django_dbqueue.states import QueueState
from django_dbqueue.tables.flow import QueuePause
from django_dbqueue.tables.schedule import Schedule, ScheduleFiring
from django_dbqueue.tables.worker_process import WorkerProcess
from django_dbqueue.worker import Worker
from tests.testapp.models import AtomicNoop, Noop

#: Statements one more atomic job adds: its success UPDATE (which is also its fenced row lock,
#: sent before the handler) and its attempt row's INSERT … SELECT. SQLite has no row locks:
#: there the job reads its row first and writes its success after the handler, in a
#: transaction Django opens with a BEGIN it sends through the cursor.
ATOMIC_PER_JOB = {
    "mysql": {"UPDATE": 1, "INSERT": 1},
    "postgresql": {"UPDATE": 1, "INSERT": 1},
    "sqlite": {"BEGIN": 1, "SELECT": 1, "UPDATE": 1, "INSERT": 1},
}


def _timed_tables() -> tuple[str, ...]:
    """Tables the worker reads on a timer, not per job or per claim: the schedules (its
    ticker), the pauses (cached for a while), its own heartbeat row."""
    return tuple(model._meta.db_table for model in (Schedule, ScheduleFiring, QueuePause, WorkerProcess))


def _drain(model: type[Noop], jobs: int) -> collections.Counter[str]:
    """Run ``jobs`` rows of ``model`` in one claim; the statements sent, by their first word,
    less those of the timers (whether a timer fires during a drain is a matter of time)."""
    model.objects.bulk_create([model() for _ in range(jobs)])
    sent: collections.Counter[str] = collections.Counter()
    timed = _timed_tables()

    def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if not any(table in sql for table in timed):
            sent[sql.split(None, 1)[0].upper()] += 1
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        stats = Worker(models=[model], burst=True, handle_signals=False, batch_size=jobs).run()
    assert stats.succeeded == jobs
    assert set(model.objects.values_list("queue_state", flat=True)) == {QueueState.SUCCEEDED}
    model.objects.all().delete()
    return sent


def _per_job(model: type[Noop], few: int, many: int) -> dict[str, float]:
    small, large = _drain(model, few), _drain(model, many)
    kinds = set(small) | set(large)
    added = {kind: (large[kind] - small[kind]) / (many - few) for kind in kinds}
    return {kind: value for kind, value in added.items() if value}


@pytest.mark.django_db(transaction=True)
def test_an_atomic_job_is_two_statements_where_rows_can_be_locked() -> None:
    """No locking read before the handler (the success UPDATE is the lock) and no statement
    of the outcome besides the UPDATE and the attempt row."""
    assert _per_job(AtomicNoop, 3, 13) == ATOMIC_PER_JOB[connection.vendor]


@pytest.mark.django_db(transaction=True)
def test_a_lease_mode_claim_costs_the_same_statements_whatever_its_size(settings) -> None:
    """A claim's rows are claimed, loaded, and their successes written together: one more
    job adds no statement (one flush per claim here)."""
    settings.DBQUEUE_FLUSH_INTERVAL = 3600
    assert _per_job(Noop, 5, 45) == {}
