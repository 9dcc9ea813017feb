"""PostgreSQL through psycopg's server-side binding, with prepared statements
(``"OPTIONS": {"server_side_binding": True, "prepare_threshold": 5}``,
docs/reference/databases.md): the server types each parameter itself, and a statement run five
times on a connection is prepared and run by name from then on.

`make test-postgresql-prepared` runs the queue's contract, and the fair and flow-control claims
(whose statements are built once, with parameters where each claim's values go), on such a
connection (``DBQUEUE_TEST_PREPARED=1``, tests/settings.py). The test here checks that the
pass is what it says: the claim's and the outcome's statements do run prepared, and give the
same rows as the plain claim does.
"""

from __future__ import annotations

import os

import pytest
from django.db import connection

from django_dbqueue.queue.outcome import Outcome
from django_dbqueue.queue.record import record
from django_dbqueue.states import QueueState
from tests.conftest import running_vendor
from tests.testapp.models import Job

PREPARED = bool(os.environ.get("DBQUEUE_TEST_PREPARED"))

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not (PREPARED and running_vendor() == "postgresql"),
        reason="PostgreSQL with prepared statements: make test-postgresql-prepared (DBQUEUE_TEST_PREPARED=1)",
    ),
]

#: psycopg prepares a statement on its fifth run on a connection (``prepare_threshold``).
RUNS = 8


def prepared_statements() -> list[tuple[str, int]]:
    """The statements this connection has prepared, with how many times each ran from its
    prepared plan (custom or generic)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement, generic_plans + custom_plans FROM pg_prepared_statements")
        return [(sql, runs) for sql, runs in cursor.fetchall()]


def test_the_connection_binds_on_the_server_and_prepares() -> None:
    assert connection.settings_dict["OPTIONS"].get("server_side_binding") is True
    assert connection.settings_dict["OPTIONS"].get("prepare_threshold") == 5


def test_the_claim_and_its_outcome_run_prepared() -> None:
    Job.objects.bulk_create([Job(name=str(n), queue_priority=n % 3) for n in range(RUNS * 2)])
    in_claim_order = Job.objects.ready().order_by("-queue_priority", "queue_run_at", "pk")
    order = list(in_claim_order.values_list("pk", flat=True))
    taken = []
    for _ in range(RUNS):
        rows = Job.objects.claim(2, worker_id="prepared", lease=60)
        assert [row.queue_state for row in rows] == [QueueState.RUNNING] * 2
        taken.extend(row.pk for row in rows)
        record(Job, rows[0].queue_claim(), [Outcome.succeeded(row) for row in rows])
    # The same rows, in the same order, as the claim without prepared statements gives.
    assert taken == order
    assert Job.objects.filter(queue_state=QueueState.SUCCEEDED).count() == RUNS * 2
    # The claim's locking SELECT, its UPDATE and the outcome's UPDATE each ran from a
    # prepared statement from its fifth run on: three or more of the eight.
    ran = [sql for sql, runs in prepared_statements() if runs >= RUNS - 5]
    locking = [sql for sql in ran if sql.startswith("SELECT") and "FOR UPDATE SKIP LOCKED" in sql]
    updates = [sql for sql in ran if sql.startswith('UPDATE "testapp_job"')]
    assert len(locking) == 1, ran
    assert len(updates) == 2, ran  # the claim's (RUNNING) and the outcome's (SUCCEEDED)
    # The values are the server's parameters, not text in the statement.
    assert all("'running'" not in sql and "'succeeded'" not in sql for sql in updates), updates
