"""Invariant 5: the claim's cost does not grow with finished rows (EXPLAIN at 1,000,000)."""

from __future__ import annotations

import json

import pytest
from django.db import connection, transaction

from tests.testapp.models import Job

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

FINISHED = 1_000_000
READY = 300


def fill() -> None:
    table = connection.ops.quote_name(Job._meta.db_table)
    columns = (
        "queue_state, queue_priority, queue_run_at, queue_attempts, queue_last_error, "
        "queue_enqueued_at, queue_finished_at, name, action, fail_times, sleep, note"
    )
    with connection.cursor() as cursor:
        if connection.vendor == "mysql":
            cursor.execute(
                f"INSERT INTO {table} ({columns}) SELECT 'succeeded', seq % 5, "
                "UTC_TIMESTAMP(6) - INTERVAL seq SECOND, 1, '', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), "
                f"'', 'ok', 0, 0, '' FROM seq_1_to_{FINISHED}"
            )
            cursor.execute(f"ANALYZE TABLE {table}")
        else:
            cursor.execute(
                f"INSERT INTO {table} ({columns}) SELECT 'succeeded', s % 5, "
                "now() - s * interval '1 second', 1, '', now(), now(), '', 'ok', 0, 0, '' "
                f"FROM generate_series(1, {FINISHED}) s"
            )
            cursor.execute(f"ANALYZE {table}")
    Job.objects.bulk_create([Job(name=str(i), queue_priority=i % 3) for i in range(READY)])


def claim_sql() -> tuple[str, tuple]:
    with transaction.atomic():  # Django compiles FOR UPDATE only inside a transaction
        return Job.objects.all().claim_candidates(100).query.sql_with_params()


@pytest.mark.skipif("connection.vendor != 'mysql'")
def test_claim_uses_the_index_and_reads_few_rows_on_mysql() -> None:
    fill()
    sql, params = claim_sql()
    index = Job._meta.indexes[0].name
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, params)
        names = [c[0] for c in cursor.description]
        plan = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        cursor.execute("SHOW SESSION STATUS LIKE 'Handler_read%%'")
        before = {k: int(v) for k, v in cursor.fetchall()}
        cursor.execute(sql, params)
        assert len(cursor.fetchall()) == 100
        cursor.execute("SHOW SESSION STATUS LIKE 'Handler_read%%'")
        after = {k: int(v) for k, v in cursor.fetchall()}
    print("EXPLAIN:", plan)
    [step] = plan
    assert step["key"] == index
    assert step["type"] in ("ref", "range")
    assert "filesort" not in (step["Extra"] or "")
    read = sum(after[k] - before[k] for k in after)
    print("index entries read for one claim of 100:", read)
    # 100 claimed + the ready rows at higher priorities; nowhere near the million finished.
    assert read < 5 * READY


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_claim_uses_the_index_on_postgresql() -> None:
    fill()
    sql, params = claim_sql()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params)
        plan = cursor.fetchone()[0]
    text = json.dumps(plan)
    print("EXPLAIN:", text[:3000])
    assert Job._meta.indexes[0].name in text
    assert '"Seq Scan"' not in text
    assert '"Sort"' not in text  # rows come in index order, LIMIT stops the scan

    def rows_scanned(node: dict) -> int:
        own = node.get("Actual Rows", 0) if "Index" in node.get("Node Type", "") else 0
        return own + sum(rows_scanned(child) for child in node.get("Plans", []))

    assert rows_scanned(plan[0]["Plan"]) < 5 * READY
