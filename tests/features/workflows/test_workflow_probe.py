"""An idle worker's probe with many parked workflow rows (issue #36: "100,000 sleeping rows
cost an idle worker nothing beyond the claim's index probe").

A parked row is READY with a future due time. The claim index orders READY rows by priority
before their due time, so a probe with nothing due walked every parked row's entry (20,000
entries, 15 ms, at 20,000 parked rows on MariaDB). The due index ``(queue_state,
queue_run_at)`` puts the due rows in one range of their own: the probe reads its first entry
or none, and a claim with few rows due reads those, not the parked rows after them.
"""

from __future__ import annotations

import json

import pytest
from django.db import connection, transaction

from django_dbqueue.models import DUE_INDEX_FIELDS
from tests.testapp.models import AtomicWorkflow

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.databases("mysql", "postgresql", reason="the plan and the entries read are each server's"),
]

PARKED = 20_000
DUE = 3


def park_many() -> None:
    """``PARKED`` rows parked until the year 9000 (a wait with no timeout), and ``DUE`` due."""
    table = connection.ops.quote_name(AtomicWorkflow._meta.db_table)
    columns = "queue_state, queue_priority, queue_run_at, queue_attempts, queue_last_error, queue_enqueued_at"
    domain = "steps, nap, event, slow_step, slow, fail_step, pause"
    with connection.cursor() as cursor:
        if connection.vendor == "mysql":
            rows = f"FROM seq_1_to_{PARKED}"
            values = "'ready', seq % 3, '9000-01-01', 1, '', UTC_TIMESTAMP(6)"
        else:
            rows = f"FROM generate_series(1, {PARKED}) seq"
            values = "'ready', seq % 3, '9000-01-01 00:00+00', 1, '', now()"
        cursor.execute(
            f"INSERT INTO {table} ({columns}, {domain}) SELECT {values}, 3, 0, 'go', 0, 0, 0, 0 {rows}"
        )
        cursor.execute(f"ANALYZE TABLE {table}" if connection.vendor == "mysql" else f"ANALYZE {table}")


def entries_read(action) -> int:  # type: ignore[no-untyped-def]
    """MariaDB: the index entries (and rows) the session read while ``action`` ran."""
    with connection.cursor() as cursor:
        cursor.execute("SHOW SESSION STATUS LIKE 'Handler_read%%'")
        before = {name: int(value) for name, value in cursor.fetchall()}
        action()
        cursor.execute("SHOW SESSION STATUS LIKE 'Handler_read%%'")
        after = {name: int(value) for name, value in cursor.fetchall()}
    return sum(after[name] - before[name] for name in after)


@pytest.mark.skipif("connection.vendor != 'mysql'")
def test_the_idle_probe_reads_no_parked_row_on_mariadb() -> None:
    park_many()
    queue = AtomicWorkflow.objects.all()
    assert queue.has_ready() is False
    read = entries_read(queue.has_ready)
    print("index entries read by a probe over", PARKED, "parked rows:", read)
    assert read < 10  # was 20,001: every parked row's entry of the claim index


@pytest.mark.skipif("connection.vendor != 'mysql'")
def test_a_claim_with_few_rows_due_reads_those_not_the_parked_ones_on_mariadb() -> None:
    park_many()
    due = [AtomicWorkflow.objects.create(steps=1) for _ in range(DUE)]
    claimed: list[AtomicWorkflow] = []
    read = entries_read(lambda: claimed.extend(AtomicWorkflow.objects.all().claim(limit=100)))
    print("entries read by a claim of 100 with", DUE, "due and", PARKED, "parked:", read)
    assert sorted(row.pk for row in claimed) == sorted(row.pk for row in due)
    assert read < 100


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_the_idle_probe_reads_no_parked_row_on_postgresql() -> None:
    park_many()
    queue = AtomicWorkflow.objects.all()
    sql, params = queue.ready().order_by().values("pk")[:1].query.sql_with_params()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
        plan = cursor.fetchone()[0]
    text = json.dumps(plan)
    print("EXPLAIN:", text[:2000])
    (due_index,) = [i.name for i in AtomicWorkflow._meta.indexes if tuple(i.fields) == DUE_INDEX_FIELDS]
    assert due_index in text

    def rows_scanned(node: dict) -> int:
        own = node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)
        return own + sum(rows_scanned(child) for child in node.get("Plans", []))

    assert rows_scanned(plan[0]["Plan"]) < 10
    assert queue.has_ready() is False
