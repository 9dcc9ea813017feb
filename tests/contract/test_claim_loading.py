"""A claim's rows are loaded by one SELECT built once per model (queue/loading.py): the
statements of a claim do not grow with its size, and each instance holds what a QuerySet
would have given it, value for value and type for type (issue #33)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, models
from django.test.utils import CaptureQueriesContext

from django_dbqueue.queue.loading import loadable, row_loader
from django_dbqueue.tables.flow import QueuePause
from tests.testapp.models import AtomicNoop, HostileJob, Noop, Ticket

pytestmark = pytest.mark.django_db(transaction=True)


def _data_statements(limit: int) -> list[str]:
    """The statements of one claim of ``limit`` rows, transaction control left out (SQLite's
    BEGIN, the savepoints of a caller's transaction), and the read of the pauses (cached for a
    while: whether it is read again during a claim is a matter of time)."""
    Noop.objects.bulk_create([Noop() for _ in range(limit)])
    with CaptureQueriesContext(connection) as queries:
        assert len(Noop.objects.claim(limit)) == limit
    control = ("BEGIN", "COMMIT", "SAVEPOINT", "RELEASE", "ROLLBACK")
    pauses = QueuePause._meta.db_table
    return [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].split()[0].upper() not in control and pauses not in q["sql"]
    ]


def test_a_claim_is_its_locking_read_its_update_and_one_load_whatever_its_size() -> None:
    small, large = _data_statements(3), _data_statements(60)
    assert [sql.split()[0].upper() for sql in small] == ["SELECT", "UPDATE", "SELECT"], small
    assert [sql.split()[0].upper() for sql in large] == ["SELECT", "UPDATE", "SELECT"], large


def _fields(row: models.Model) -> dict[str, Any]:
    return {name: value for name, value in row.__dict__.items() if name != "_state"}


@pytest.mark.parametrize("model", [Noop, AtomicNoop, Ticket, HostileJob])
def test_claimed_instances_hold_what_a_queryset_loads(model) -> None:
    if model is Ticket:
        rows = [Ticket(subject=f"s{i}", customer=i, handled=bool(i % 2)) for i in range(5)]
    elif model is HostileJob:
        rows = [HostileJob(data={"n": i, "text": "é", "list": [1, 2.5, None]}) for i in range(5)]
    else:
        rows = [model(payload=f"p{i}") for i in range(5)]
    model.objects.bulk_create(rows)
    claimed = model.objects.claim(5)
    token = claimed[0].queue_claim().token
    loaded = {row.pk: row for row in model._base_manager.filter(queue_token=token)}
    assert loadable(model)
    assert [type(row) for row in claimed] == [model] * 5
    for row in claimed:
        expected = _fields(loaded[row.pk])
        got = {name: value for name, value in _fields(row).items() if name != "_queue_claim"}
        assert got == expected
        assert [type(value) for value in got.values()] == [type(value) for value in expected.values()]
        assert row._state.db == loaded[row.pk]._state.db and not row._state.adding


def test_the_loader_takes_only_the_rows_of_its_token() -> None:
    Noop.objects.bulk_create([Noop() for _ in range(4)])
    first, second = Noop.objects.claim(2), Noop.objects.claim(2)
    ids = [row.pk for row in first + second]
    claim = first[0].queue_claim()
    assert {row.pk for row in row_loader(Noop, "default").load(ids, claim)} == {row.pk for row in first}
    assert row_loader(Noop, "default").load([], claim) == []


def test_the_claims_times_are_given_as_written_not_read_back() -> None:
    """The times the claim's UPDATE wrote (``Claim.times()``) are not in the loader's SELECT:
    the instances get the values written, which the rows hold."""
    Noop.objects.bulk_create([Noop() for _ in range(3)])
    claimed = Noop.objects.claim(3)
    claim = claimed[0].queue_claim()
    with CaptureQueriesContext(connection) as queries:
        row_loader(Noop, "default").load([row.pk for row in claimed], claim)
    (select,) = [q["sql"] for q in queries.captured_queries if q["sql"].upper().startswith("SELECT")]
    assert "queue_locked_until" not in select and "queue_last_attempt_at" not in select
    assert "queue_run_at" in select
    stored = Noop._base_manager.filter(pk__in=[row.pk for row in claimed])
    for held in stored.values("queue_locked_until", "queue_last_attempt_at"):
        assert held == claim.times()


def test_the_claims_update_writes_the_claim_and_counts_the_attempt() -> None:
    """The claim's UPDATE (queue/statements.py, built once per model): RUNNING under the
    claim's token and worker, at its times, one more attempt, the rows not taken untouched."""
    Noop.objects.bulk_create([Noop(queue_attempts=2) for _ in range(6)])
    first, second = Noop.objects.claim(3, worker_id="w-1"), Noop.objects.claim(2, worker_id="w-2")
    for claimed, worker in ((first, "w-1"), (second, "w-2")):
        claim = claimed[0].queue_claim()
        stored = Noop._base_manager.filter(pk__in=[row.pk for row in claimed])
        for held in stored.values("queue_state", "queue_token", "queue_locked_by", "queue_attempts"):
            assert held == {
                "queue_state": "running",
                "queue_token": claim.token,
                "queue_locked_by": worker,
                "queue_attempts": 3,
            }
        assert [row.queue_attempts for row in claimed] == [3] * len(claimed)
    (left,) = Noop._base_manager.exclude(pk__in=[row.pk for row in first + second])
    assert (left.queue_state, left.queue_token, left.queue_attempts) == ("ready", None, 2)
