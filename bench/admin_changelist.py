"""Benchmark (not a test): the admin changelist of a 1,000,000-row queue table on MariaDB.

    DATABASE_URL=mysql://root@127.0.0.1:3306/admin_bench .venv/bin/python bench/admin_changelist.py
    DATABASE_URL=mysql://root@127.0.0.1:3306/admin_bench .venv/bin/python bench/admin_changelist.py --example

``--example`` times the example shop's ``OrderAdmin`` as shipped (``list_select_related =
["customer"]``, a customer-country filter, search by customer name) over 1,000,000 orders of
5,000 customers, instead of the test app's Ticket — on MariaDB or on PostgreSQL
(``DATABASE_URL=postgres://postgres@127.0.0.1:5432/admin_bench``: ``generate_series``, then
``VACUUM ANALYZE``), into ``bench/out/admin_changelist_example_<vendor>.md``. ``--only
middle,last`` times the pages whose names have those words.

Fills ``testapp_ticket`` (the test app's Ticket: QueueMixin + subject/customer) with a
realistic mix — mostly finished rows, some failed, a few ready, scheduled and running —
using MariaDB's sequence engine (``INSERT … SELECT … FROM seq_1_to_1000000``), then times
admin pages through Django's test client (the whole request: middleware, ChangeList,
templates) and records the SQL each ran. It runs every page twice: first with only the
index QueueMixin gives, then with two indexes a real project would have (the domain's
``customer`` — a ForeignKey gets one anyway — and ``(queue_state, queue_finished_at)`` for the
dashboard's "last hour" numbers). Writes a Markdown report to ``bench/out/admin_changelist.md``.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
os.environ.setdefault("DATABASE_URL", "mysql://root@127.0.0.1:3306/admin_bench")

import django  # noqa: E402

django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, connections  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.urls import reverse  # noqa: E402
from shop.models import Order  # noqa: E402

from django_dbqueue.admin.pagination import table_row_estimate  # noqa: E402
from tests.testapp.models import Ticket  # noqa: E402

UTC = timezone.utc  # datetime.UTC is Python 3.11+

EXTRA_INDEXES = {
    "admin_bench_customer": "(customer)",
    "admin_bench_state_finished": "(queue_state, queue_finished_at)",
}

# seq % 1000 decides the state: 0-969 succeeded, 970-979 failed, 980-989 ready (half of them
# scheduled in the future), 990 running, 991-994 cancelled, 995-999 idle.
FILL = """
INSERT INTO testapp_ticket (subject, customer, handled, queue_state, queue_priority, queue_run_at,
    queue_attempts, queue_last_error, queue_last_attempt_at, queue_locked_by, queue_locked_until,
    queue_token, queue_enqueued_at, queue_finished_at)
SELECT CONCAT('Order ', seq), seq MOD 5000, seq MOD 1000 < 970,
    CASE WHEN seq MOD 1000 < 970 THEN 'succeeded' WHEN seq MOD 1000 < 980 THEN 'failed'
         WHEN seq MOD 1000 < 990 THEN 'ready' WHEN seq MOD 1000 = 990 THEN 'running'
         WHEN seq MOD 1000 < 995 THEN 'cancelled' ELSE 'idle' END,
    seq MOD 7,
    CASE WHEN seq MOD 1000 BETWEEN 985 AND 989 THEN @now + INTERVAL (seq MOD 86400) SECOND
         ELSE @now - INTERVAL (seq MOD 2592000) SECOND END,
    CASE WHEN seq MOD 1000 BETWEEN 970 AND 979 THEN 8 WHEN seq MOD 1000 < 970 THEN 1 ELSE 0 END,
    CASE WHEN seq MOD 1000 BETWEEN 970 AND 979
         THEN CONCAT('Traceback (most recent call last):\\n  File "shop/models.py", line 80, in process\\n',
                     'TimeoutError: payment gateway timed out for order ', seq)
         ELSE '' END,
    CASE WHEN seq MOD 1000 < 980 OR seq MOD 1000 = 990 THEN @now - INTERVAL (seq MOD 2592000) SECOND END,
    CASE WHEN seq MOD 1000 = 990 THEN CONCAT('web-', seq MOD 4, ':100') END,
    CASE WHEN seq MOD 1000 = 990 THEN @now + INTERVAL 5 MINUTE END,
    CASE WHEN seq MOD 1000 = 990 THEN seq END,
    @now - INTERVAL (seq MOD 2592000) SECOND - INTERVAL 1 MINUTE,
    CASE WHEN seq MOD 1000 < 980 OR seq MOD 1000 BETWEEN 991 AND 994
         THEN @now - INTERVAL (seq MOD 2592000) SECOND END
FROM seq_1_to_{n}
"""


# The example shop: 5,000 customers (one in 50 abroad), orders spread over them, the same mix of
# queue states as the tickets. Written once for MariaDB's sequence engine (``seq_1_to_N``) and
# PostgreSQL's ``generate_series``: ``{now}``, ``{seq}`` and ``ago()``/``ahead()`` differ.
FILL_CUSTOMERS = """
INSERT INTO shop_customer (id, name, country)
SELECT seq, CONCAT('Customer ', seq), CASE WHEN MOD(seq, 50) = 0 THEN 'FR' ELSE 'DE' END FROM {seq}
"""
FILL_ORDERS = """
INSERT INTO shop_order (customer_id, total, status, created, queue_state, queue_priority, queue_run_at,
    queue_attempts, queue_last_error, queue_last_attempt_at, queue_locked_by, queue_locked_until,
    queue_token, queue_enqueued_at, queue_finished_at)
SELECT MOD(seq, 5000) + 1, MOD(seq, 100000) / 100.0,
    CASE WHEN MOD(seq, 1000) < 970 THEN 'fulfilled' ELSE 'new' END,
    {created},
    CASE WHEN MOD(seq, 1000) < 970 THEN 'succeeded' WHEN MOD(seq, 1000) < 980 THEN 'failed'
         WHEN MOD(seq, 1000) < 990 THEN 'ready' WHEN MOD(seq, 1000) = 990 THEN 'running'
         WHEN MOD(seq, 1000) < 995 THEN 'cancelled' ELSE 'idle' END,
    MOD(seq, 7),
    CASE WHEN MOD(seq, 1000) BETWEEN 985 AND 989 THEN {ahead_day} ELSE {ago} END,
    CASE WHEN MOD(seq, 1000) BETWEEN 970 AND 979 THEN 3 WHEN MOD(seq, 1000) < 970 THEN 1 ELSE 0 END,
    CASE WHEN MOD(seq, 1000) BETWEEN 970 AND 979
         THEN CONCAT('Traceback (most recent call last):\\n  File "shop/models.py", line 40, in process\\n',
                     'PaymentDeclined: card declined for order ', seq)
         ELSE '' END,
    CASE WHEN MOD(seq, 1000) < 980 OR MOD(seq, 1000) = 990 THEN {ago} END,
    CASE WHEN MOD(seq, 1000) = 990 THEN CONCAT('web-', MOD(seq, 4), ':100') END,
    CASE WHEN MOD(seq, 1000) = 990 THEN {ahead_5m} END,
    CASE WHEN MOD(seq, 1000) = 990 THEN seq END,
    {created},
    CASE WHEN MOD(seq, 1000) < 980 OR MOD(seq, 1000) BETWEEN 991 AND 994 THEN {ago} END
FROM {seq}
"""


def fill_sql(template: str, n: int, start: int = 1) -> str:
    """``template`` in this server's dialect for ``seq`` from ``start`` to ``n`` (every value
    is computed, none comes from input)."""
    if connection.vendor == "mysql":
        seq, now = f"seq_{start}_to_{n}", "@now"
        shift = "{now} {sign} INTERVAL ({secs}) SECOND"
    else:
        seq, now = f"generate_series({start}, {n}) AS s(seq)", "now()"
        shift = "{now} {sign} ({secs}) * INTERVAL '1 second'"
    ago = shift.format(now=now, sign="-", secs="MOD(seq, 2592000)")
    return template.format(
        seq=seq,
        ago=ago,
        created=shift.format(now=now, sign="-", secs="MOD(seq, 2592000) + 60"),
        ahead_day=shift.format(now=now, sign="+", secs="MOD(seq, 86400)"),
        ahead_5m=shift.format(now=now, sign="+", secs="300"),
    )


def fill_example(n: int, refill: bool) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM shop_order")
        have = cursor.fetchone()[0]
        if have == n and not refill:
            print(f"shop_order already has {have:,} rows")
            return
        if connection.vendor == "mysql":
            cursor.execute("SET FOREIGN_KEY_CHECKS = 0")
            for table in ("shop_invoice", "shop_order", "shop_customer"):
                cursor.execute(f"TRUNCATE {table}")
            cursor.execute("SET FOREIGN_KEY_CHECKS = 1")
            cursor.execute("SET @now = UTC_TIMESTAMP(6)")
        else:
            cursor.execute("TRUNCATE shop_invoice, shop_order, shop_customer RESTART IDENTITY CASCADE")
        started = time.perf_counter()
        cursor.execute(fill_sql(FILL_CUSTOMERS, 5000))
        cursor.execute(fill_sql(FILL_ORDERS, n))
        print(f"filled {n:,} orders in {time.perf_counter() - started:.1f}s")
        analyse(["shop_customer", "shop_order"])


def analyse(tables: list[str], using: str = "default") -> None:
    """Fresh statistics (the row estimate) and, on PostgreSQL, a fresh visibility map: an
    index-only scan reads the heap for every page autovacuum has not yet marked all-visible."""
    with connections[using].cursor() as cursor:
        for table in tables:
            if connection.vendor == "mysql":
                cursor.execute(f"ANALYZE TABLE {table}")
                cursor.fetchall()
            else:
                if table == "shop_customer":
                    cursor.execute("SELECT setval('shop_customer_id_seq', 5000)")
                cursor.execute(f"VACUUM ANALYZE {table}")


def ensure_database(n: int, refill: bool, example: bool = False) -> None:
    settings = connection.settings_dict
    name = settings["NAME"]
    assert name.startswith(("admin_", "dbq_")), "use a database of its own, named admin_… or dbq_…"
    if connection.vendor == "mysql":
        import MySQLdb

        server = MySQLdb.connect(
            host=settings["HOST"] or "127.0.0.1",
            port=int(settings["PORT"] or 3306),
            user=settings["USER"],
            passwd=settings["PASSWORD"] or "",
        )
        server.cursor().execute(f"CREATE DATABASE IF NOT EXISTS `{name}` CHARACTER SET utf8mb4")
        server.close()
    else:
        import psycopg

        with psycopg.connect(
            host=settings["HOST"] or "127.0.0.1",
            port=int(settings["PORT"] or 5432),
            user=settings["USER"],
            password=settings["PASSWORD"] or None,
            dbname="postgres",
            autocommit=True,
        ) as server:
            if not server.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
                server.execute(f'CREATE DATABASE "{name}"')
    call_command("migrate", verbosity=0)
    if example:
        fill_example(n, refill)
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM testapp_ticket")
        have = cursor.fetchone()[0]
        if have == n and not refill:
            print(f"testapp_ticket already has {have:,} rows")
            return
        drop_extra_indexes()
        cursor.execute("TRUNCATE testapp_ticket")
        cursor.execute("SET @now = UTC_TIMESTAMP(6)")
        started = time.perf_counter()
        cursor.execute(FILL.format(n=n))
        print(f"filled {n:,} rows in {time.perf_counter() - started:.1f}s")
        cursor.execute("ANALYZE TABLE testapp_ticket")
        cursor.fetchall()


def drop_extra_indexes() -> None:
    with connection.cursor() as cursor:
        for name in EXTRA_INDEXES:
            cursor.execute(f"DROP INDEX IF EXISTS {name} ON testapp_ticket")


def add_extra_indexes() -> None:
    with connection.cursor() as cursor:
        for name, columns in EXTRA_INDEXES.items():
            cursor.execute(f"CREATE INDEX IF NOT EXISTS {name} ON testapp_ticket {columns}")
        cursor.execute("ANALYZE TABLE testapp_ticket")
        cursor.fetchall()


def pages() -> list[tuple[str, str]]:
    changelist = reverse("admin:testapp_ticket_changelist")
    since = "queue_finished_at__range__gte_0=2026-11-17&queue_finished_at__range__gte_1=00:00:00"
    return [
        ("changelist, no filter (default)", changelist),
        ("changelist, page 50", changelist + "?p=50"),
        ("state = ready", changelist + "?queue_state__exact=ready"),
        ("state = failed", changelist + "?queue_state__exact=failed"),
        ("has error", changelist + "?queue_has_error=yes"),
        ("customer 3345 (search =customer)", changelist + "?q=3345"),
        ("customer 3345 (?customer=, as a ForeignKey filter does)", changelist + "?customer=3345"),
        (
            "customer 3345 (search), failed, finished since Tuesday",
            changelist + f"?q=3345&queue_state__exact=failed&{since}",
        ),
        (
            "customer 3345 (?customer=), failed, finished since Tuesday",
            changelist + f"?customer=3345&queue_state__exact=failed&{since}",
        ),
        ("priority >= 5, state ready", changelist + "?queue_state__exact=ready&queue_priority__range__gte=5"),
        ("dashboard", reverse("admin:testapp_ticket_dbqueue_dashboard")),
    ]


def example_pages(n: int) -> list[tuple[str, str]]:
    changelist = reverse("admin:shop_order_changelist")
    # The last page the list links to: its count is the table's row estimate.
    last = ((table_row_estimate(Order, "default") or n) + 99) // 100
    today = datetime.now(UTC).date()
    since = f"queue_finished_at__range__gte_0={today - timedelta(days=7)}&queue_finished_at__range__gte_1="
    days = (
        f"queue_finished_at__range__gte_0={today - timedelta(days=10)}"
        f"&queue_finished_at__range__lte_0={today - timedelta(days=8)}"
    )
    return [
        ("changelist, no filter (default)", changelist),
        ("changelist, page 2", changelist + "?p=2"),
        ("changelist, page 50", changelist + "?p=50"),
        (f"changelist, page {last // 4:,} (a quarter in)", changelist + f"?p={last // 4}"),
        (f"changelist, page {last // 2:,} (the middle)", changelist + f"?p={last // 2}"),
        (f"changelist, page {last * 3 // 4:,} (three quarters in)", changelist + f"?p={last * 3 // 4}"),
        (f"changelist, last page ({last:,})", changelist + f"?p={last}"),
        ("state = ready", changelist + "?queue_state__exact=ready"),
        ("state = failed", changelist + "?queue_state__exact=failed"),
        ("state = succeeded", changelist + "?queue_state__exact=succeeded"),
        ("state = succeeded, page 2,000", changelist + "?queue_state__exact=succeeded&p=2000"),
        ("has error", changelist + "?queue_has_error=yes"),
        ("status = new", changelist + "?status=new"),
        ("customer country = FR", changelist + "?customer__country=FR"),
        ("customer 3345 (?customer=)", changelist + "?customer=3345"),
        ("finished in a three-day range (dates only)", changelist + f"?{days}"),
        (
            "customer 3345, failed, finished in the last week (date only)",
            changelist + f"?customer=3345&queue_state__exact=failed&{since}",
        ),
        ("dashboard", reverse("admin:shop_order_dbqueue_dashboard")),
    ]


def measure(client: Client, url: str, repeat: int) -> tuple[list[float], list[dict[str, Any]], float, float]:
    """Wall times of ``repeat`` requests, the last one's statements, and the median time the
    database took (the statements' own times) and this process's CPU took per request: on a
    busy machine the wall time also counts waiting for a CPU."""
    client.get(url)  # warm caches, template loading
    times, sql, cpu = [], [], []
    queries: list[dict[str, Any]] = []
    for _ in range(repeat):
        with CaptureQueriesContext(connection) as captured:
            started, cpu_started = time.perf_counter(), time.process_time()
            response = client.get(url)
            times.append(time.perf_counter() - started)
            cpu.append(time.process_time() - cpu_started)
        assert response.status_code == 200, (url, response.status_code)
        queries = captured.captured_queries
        sql.append(sum(float(q["time"]) for q in queries))
    return times, queries, statistics.median(sql), statistics.median(cpu)


def explain(sql: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql)
        names = [c[0] for c in cursor.description]
        rows = cursor.fetchall()
    if connection.vendor == "postgresql":  # one column of text lines: keep the plan's nodes
        return " | ".join(" ".join(row[0].split()) for row in rows if "->" in row[0] or row is rows[0])
    keep = ("table", "type", "key", "rows", "Extra")
    return "; ".join(", ".join(f"{k}={row[names.index(k)]}" for k in keep if k in names) for row in rows)


def run(repeat: int, label: str, out: list[str], example_rows: int = 0, only: str = "") -> None:
    client = Client()
    client.force_login(User.objects.get(username="admin_bench"))
    out.append(f"\n## {label}\n")
    out.append(
        "| page | median | min | SQL (median) | CPU (median) | queries |\n|---|---:|---:|---:|---:|---:|"
    )
    details = []
    table = "shop_order" if example_rows else "testapp_ticket"
    for name, url in example_pages(example_rows) if example_rows else pages():
        if only and not any(word in name for word in only.split(",")):
            continue
        times, queries, db_time, cpu = measure(client, url, repeat)
        median, best = statistics.median(times), min(times)
        out.append(
            f"| {name} | {median * 1000:.0f} ms | {best * 1000:.0f} ms | {db_time * 1000:.0f} ms | "
            f"{cpu * 1000:.0f} ms | {len(queries)} |"
        )
        print(
            f"{label:>22} | {name:<48} median {median * 1000:7.1f} ms  min {best * 1000:7.1f} ms  "
            f"SQL {db_time * 1000:6.1f} ms  CPU {cpu * 1000:6.1f} ms  {len(queries)} queries"
        )
        details.append(f"\n### {name} — `{url}`\n")
        for q in queries:
            sql = q["sql"]
            if table in sql or "information_schema" in sql or "pg_class" in sql:
                catalogue = "information_schema" in sql or "pg_class" in sql
                plan = explain(sql) if sql.upper().startswith("SELECT") and not catalogue else ""
                details.append(
                    f"* {float(q['time']) * 1000:.1f} ms `{sql}`" + (f"\n  EXPLAIN: {plan}" if plan else "")
                )
            else:
                details.append(f"* {float(q['time']) * 1000:.1f} ms (session/auth) `{sql[:90]}…`")
    if only:
        out.extend(details)
        return
    # One bulk action over a whole filtered set ("select all"), as the operator runs it: the
    # confirmation page (with its exact count), then the confirmed statement.
    model = Order if example_rows else Ticket
    opts = model._meta
    url = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
    url += "?queue_state__exact=ready&queue_priority__range__gte=5"
    pk = model.objects.filter(queue_state="ready", queue_priority__gte=5).values_list("pk", flat=True).first()
    data = {"action": "dbqueue_reprioritize", "select_across": "1", "_selected_action": [str(pk)]}
    started = time.perf_counter()
    page = client.post(url, {**data, "index": "0"})
    shown = time.perf_counter() - started
    assert page.status_code == 200, page.status_code
    expected = int(re.search(r'name="dbqueue_expected" value="(\d+)"', page.content.decode()).group(1))
    data.update(dbqueue_apply="1", priority="9", dbqueue_expected=str(expected))
    with CaptureQueriesContext(connection) as captured:
        started = time.perf_counter()
        response = client.post(url, data)
        took = time.perf_counter() - started
    assert response.status_code == 302, response.status_code
    update = f"UPDATE {connection.ops.quote_name(table)}"
    writes = [q for q in captured.captured_queries if q["sql"].startswith(update)]
    out.append(
        f"\n### action: reprioritise all {expected:,} READY rows with priority >= 5 "
        f"(select all) — confirmation page {shown * 1000:.0f} ms, action {took * 1000:.0f} ms\n"
    )
    out.extend(f"* {float(q['time']) * 1000:.1f} ms `{q['sql']}`" for q in writes)
    print(
        f"{label:>22} | reprioritise (select all: page {shown * 1000:.1f} ms, "
        f"{len(writes)} UPDATE {took * 1000:.1f} ms)"
    )
    out.extend(details)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--refill", action="store_true", help="refill the table even if it has --rows rows")
    parser.add_argument("--example", action="store_true", help="the example shop's OrderAdmin as shipped")
    parser.add_argument("--only", default="", help="only the pages whose name has one of these words (a,b)")
    args = parser.parse_args()
    if connection.vendor != "mysql" and not (connection.vendor == "postgresql" and args.example):
        raise SystemExit("MariaDB (mysql://) fills with its sequence engine; PostgreSQL only with --example")
    ensure_database(args.rows, args.refill, args.example)
    User.objects.filter(username="admin_bench").delete()
    User.objects.create_superuser("admin_bench", "bench@example.com", "bench")
    with connection.cursor() as cursor:
        cursor.execute("SELECT VERSION()")
        version = cursor.fetchone()[0]
    server = f"MariaDB {version}" if connection.vendor == "mysql" else version.split(" on ")[0]
    out = [
        f"# Admin changelist at {args.rows:,} rows"
        + (" (the example shop's OrderAdmin)" if args.example else ""),
        f"\n{server}; {args.rows:,} rows; Django test client, {args.repeat} timed runs after a "
        f"warm-up; list_per_page 100; {os.cpu_count()} CPUs.",
    ]
    target = ROOT / "bench" / "out"
    target.mkdir(parents=True, exist_ok=True)
    if args.example:
        run(args.repeat, "example OrderAdmin", out, example_rows=args.rows, only=args.only)
        report = target / f"admin_changelist_example_{connection.vendor}.md"
        report.write_text("\n".join(out) + "\n")
        print(f"report: {report}")
        return
    drop_extra_indexes()
    run(args.repeat, "QueueMixin's index only", out)
    add_extra_indexes()
    run(args.repeat, "+ customer, (state, finished_at)", out)
    (target / "admin_changelist.md").write_text("\n".join(out) + "\n")
    print(f"report: {target / 'admin_changelist.md'}")


if __name__ == "__main__":
    main()
