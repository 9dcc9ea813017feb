"""Optimistic atomic groups (``queue_atomic_group_optimistic``): a group's handlers run with no
savepoint each; the first failure rolls the whole group back and the group runs again with the
savepoints, the failed row not again. What commits is what the savepoint groups commit
(test_core_contract.py, test_worker.py and test_bad_input.py run their group tests both ways);
these tests pin what differs: which handlers run twice, the hooks, the statements, and that
after a failure the claim's later groups run with savepoints."""

from __future__ import annotations

from collections import Counter

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_dbqueue.states import QueueState
from django_dbqueue.worker import Worker
from tests.conftest import ledger_runs
from tests.testapp import models as testapp
from tests.testapp.models import GroupedAtomicJob, OptimisticGroupJob

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Counter[int]:
    """How many times each row's handler was called (committed or not), by primary key."""
    called: Counter[int] = Counter()
    monkeypatch.setitem(testapp.HANDLER_HOOKS, "counted", lambda row: called.update([row.pk]))
    return called


@pytest.fixture(autouse=True)
def _no_hooks_left() -> None:
    testapp.COMMITTED_HOOKS.clear()


def _group(model, failing_at: int | None, size: int = 6) -> list:
    """``size`` rows that count their calls and register an ``on_commit()`` hook, the one at
    ``failing_at`` failing every attempt."""
    return model.objects.bulk_create(
        model(name="counted", action="hook", fail_times=99 if n == failing_at else 0) for n in range(size)
    )


def _drain(model) -> Worker:
    worker = Worker(models=[model], burst=True, handle_signals=False, batch_size=6, max_jobs=6)
    worker.run()
    return worker


def test_a_failure_runs_the_handlers_before_it_twice_and_commits_each_once(calls) -> None:
    rows = _group(OptimisticGroupJob, failing_at=3)
    _drain(OptimisticGroupJob)
    before, failed, after = rows[:3], rows[3], rows[4:]
    # The optimistic run stopped at the failure; the run with savepoints ran the rest.
    assert [calls[row.pk] for row in rows] == [2, 2, 2, 1, 1, 1]
    assert ledger_runs(OptimisticGroupJob) == {row.pk: 1 for row in before + after}
    # The first run's on_commit() hooks went with its rollback: each success's ran once.
    assert sorted(testapp.COMMITTED_HOOKS) == sorted(row.pk for row in before + after)
    states = {row.pk: row for row in OptimisticGroupJob.objects.all()}
    assert {states[row.pk].queue_state for row in before + after} == {QueueState.SUCCEEDED}
    # The failed row's own error from its one run, its attempt counted once.
    failure = states[failed.pk]
    assert failure.queue_state == QueueState.READY and failure.queue_attempts == 1
    assert "planned failure on attempt 1" in failure.queue_last_error


def test_a_group_with_no_failure_runs_each_handler_once_and_sends_no_savepoint(calls) -> None:
    sent: dict[str, int] = {}
    for model in (GroupedAtomicJob, OptimisticGroupJob):
        rows = _group(model, failing_at=None)
        with CaptureQueriesContext(connection) as captured:
            _drain(model)
        sent[model.__name__] = sum("SAVEPOINT" in query["sql"].upper() for query in captured.captured_queries)
        assert [calls[row.pk] for row in rows] == [1] * 6
        assert (
            model.objects.get_queryset()
            .filter(pk__in=[r.pk for r in rows])
            .exclude(queue_state=QueueState.SUCCEEDED)
            .count()
            == 0
        )
    # The worker's own savepoints (its registration) are the same both ways: a group of six
    # with savepoints sends six SAVEPOINTs and six RELEASEs more.
    assert sent["GroupedAtomicJob"] - sent["OptimisticGroupJob"] == 6 * 2


def test_after_a_failure_the_claims_later_groups_run_with_savepoints(calls) -> None:
    # Three groups of ten in one claim: the first fails at its fourth row and runs again; the
    # third fails at its sixth, and had it run optimistic its first five would run twice.
    rows = OptimisticGroupJob.objects.bulk_create(
        OptimisticGroupJob(name="counted", fail_times=99 if n in (3, 25) else 0) for n in range(30)
    )
    Worker(models=[OptimisticGroupJob], burst=True, handle_signals=False, batch_size=30, max_jobs=30).run()
    assert [calls[row.pk] for row in rows] == [2, 2, 2] + [1] * 27
    failed = {rows[3].pk, rows[25].pk}
    assert ledger_runs(OptimisticGroupJob) == {row.pk: 1 for row in rows if row.pk not in failed}


def test_a_handler_that_exits_fails_alone_and_stops_the_worker(calls) -> None:
    rows = OptimisticGroupJob.objects.bulk_create(
        [OptimisticGroupJob(name="counted"), OptimisticGroupJob(name="counted", action="exit")]
        + [OptimisticGroupJob(name="counted") for _ in range(4)]
    )
    worker = _drain(OptimisticGroupJob)
    assert isinstance(worker.fatal, SystemExit)
    exited = OptimisticGroupJob.objects.get(pk=rows[1].pk)
    assert exited.queue_state == QueueState.FAILED and "SystemExit: 3" in exited.queue_last_error
    assert calls[rows[1].pk] == 1  # not run again: its exit is its outcome
    others = [row.pk for row in rows if row.pk != rows[1].pk]
    assert ledger_runs(OptimisticGroupJob) == dict.fromkeys(others, 1)
    assert set(OptimisticGroupJob.objects.filter(pk__in=others).values_list("queue_state", flat=True)) == {
        QueueState.SUCCEEDED
    }
