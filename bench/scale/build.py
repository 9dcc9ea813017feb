"""The databases of the scale benchmark, both on one server: ``scale_big`` (10,000,000 orders in
the shop's mix of states over 30 days, as many attempt rows, 1,000,000 purgeable messages) and
``scale_empty`` (only the big table's due, scheduled and running orders: nothing finished).
Built with INSERT … SELECT from MariaDB's sequence engine or PostgreSQL's ``generate_series``,
a million rows per statement, with a progress line per million."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.conf import settings
from django.core.management import call_command
from django.db import connections
from django.db.models import Model
from shop.models import Order

from bench.admin_changelist import FILL_CUSTOMERS, FILL_ORDERS, analyse, fill_sql
from django_dbqueue.models import Message, QueueAttempt

CHUNK = 1_000_000
ATTEMPTS = QueueAttempt._meta.db_table
MESSAGES = Message._meta.db_table
TABLES = ["shop_invoice", "shop_order", "shop_customer", ATTEMPTS, MESSAGES, "testapp_ledger"]

# One attempt per order, finished when the order did: 17 in 20 succeeded, 2 retried, 1 failed.
FILL_ATTEMPTS = f"""
INSERT INTO {ATTEMPTS} (model, object_id, attempt, worker_id, enqueued_at, due_at, claimed_at,
    finished_at, outcome, error)
SELECT 'shop.Order', CONCAT('', seq), 1 + CASE WHEN MOD(seq, 20) = 18 THEN 1 ELSE 0 END,
    CONCAT('web-', MOD(seq, 4), ':100'), {{created}}, {{created}}, {{created}}, {{ago}},
    CASE WHEN MOD(seq, 20) = 19 THEN 'failed' WHEN MOD(seq, 20) >= 17 THEN 'retried' ELSE 'succeeded' END,
    CASE WHEN MOD(seq, 20) >= 17 THEN 'PaymentDeclined: card declined' ELSE '' END
FROM {{seq}}
"""

# Messages of the test app's echo handler. Finished ones ended 31 to 60 days ago (``purgequeue
# --older-than 30d`` takes them all); ready ones are due now.
FILL_MESSAGES = """
INSERT INTO {table} (queue_state, queue_priority, queue_run_at, queue_attempts, queue_last_error,
    queue_enqueued_at, queue_finished_at, queue_last_attempt_at, queue_dependants, queue, kind,
    payload, {group}, expects_reply)
SELECT '{state}', 0, {run_at}, {attempts}, '', {run_at}, {finished}, {finished}, FALSE, 'default',
    'test.echo', {payload}, '', FALSE
FROM {{seq}}
"""


def server_execute(statement: str, name: str) -> None:
    """Run ``statement`` on the server outside any database (CREATE/DROP DATABASE)."""
    db = settings.DATABASES["default"]
    if connections["default"].vendor == "mysql":
        import MySQLdb

        server = MySQLdb.connect(host=db["HOST"], port=int(db["PORT"] or 3306), user=db["USER"], passwd="")
        server.cursor().execute(statement.format(name=f"`{name}`"))
        server.close()
        return
    import psycopg

    kwargs = {"host": db["HOST"], "port": int(db["PORT"] or 5432), "user": db["USER"]}
    with psycopg.connect(**kwargs, dbname="postgres", autocommit=True) as server:
        if (
            statement.startswith("DROP")
            or not server.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        ):
            server.execute(statement.format(name=f'"{name}"'))


def create(using: str) -> None:
    """Create the database behind alias ``using`` if missing, and migrate it."""
    name = settings.DATABASES[using]["NAME"]
    assert name.startswith("scale_"), f"the scale benchmark's databases are named scale_…, not {name}"
    mysql = connections[using].vendor == "mysql"
    server_execute(
        "CREATE DATABASE IF NOT EXISTS {name} CHARACTER SET utf8mb4" if mysql else "CREATE DATABASE {name}",
        name,
    )
    call_command("migrate", database=using, verbosity=0)


def drop(using: str) -> None:
    name = settings.DATABASES[using]["NAME"]
    assert name.startswith("scale_"), name
    connections[using].close()
    force = " WITH (FORCE)" if connections[using].vendor == "postgresql" else ""
    server_execute("DROP DATABASE IF EXISTS {name}" + force, name)


def count(using: str, table: str) -> int:
    with connections[using].cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM {table}")
        return int(cursor.fetchone()[0])


def chunked(using: str, label: str, rows: int, sql_for: Callable[[int, int], str]) -> None:
    """Insert ``rows`` rows a million at a time, a progress line after each million."""
    started = time.perf_counter()
    with connections[using].cursor() as cursor:
        if connections[using].vendor == "mysql":
            cursor.execute("SET @now = UTC_TIMESTAMP(6)")
        for first in range(1, rows + 1, CHUNK):
            last = min(rows, first + CHUNK - 1)
            cursor.execute(sql_for(first, last))
            print(
                f"  {using}: {label}: {last:,} / {rows:,}, {time.perf_counter() - started:.0f} s", flush=True
            )


@contextmanager
def without_indexes(using: str, models: list[type[Model]]) -> Iterator[None]:
    """Fill with the models' declared secondary indexes dropped, then build them once, sorted:
    inserting 10,000,000 rows into indexes bigger than the buffer pool is what takes long."""
    connection = connections[using]

    def existing(model: type[Model]) -> set[str]:
        with connection.cursor() as cursor:
            return set(connection.introspection.get_constraints(cursor, model._meta.db_table))

    for model in models:
        with connection.schema_editor() as editor:
            for index in model._meta.indexes:
                if index.name in existing(model):
                    editor.remove_index(model, index)
    yield
    started = time.perf_counter()
    for model in models:
        with connection.schema_editor() as editor:
            for index in model._meta.indexes:
                if index.name not in existing(model):
                    editor.add_index(model, index)
    print(f"  {using}: indexes built in {time.perf_counter() - started:.0f} s", flush=True)


def messages_sql(state: str, first: int, last: int) -> str:
    """Messages in ``state`` (succeeded: finished 31-60 days ago; ready: due now)."""
    mysql = connections["default"].vendor == "mysql"
    ago = (
        "@now - INTERVAL (31 * 86400 + MOD(seq, 2592000)) SECOND"
        if mysql
        else "now() - (31 * 86400 + MOD(seq, 2592000)) * INTERVAL '1 second'"
    )
    done = state == "succeeded"
    template = FILL_MESSAGES.format(
        table=MESSAGES,
        group=connections["default"].ops.quote_name("group"),
        state=state,
        run_at=ago if done else ("@now" if mysql else "now()"),
        attempts=1 if done else 0,
        finished=ago if done else "NULL",
        payload="'{{}}'" if mysql else "CAST('{{}}' AS jsonb)",
    )
    return fill_sql(template, last, first)


def build(rows: int, history: int) -> None:
    """Both databases; a database that already holds these numbers is kept (``--keep``)."""
    for using in ("default", "empty"):
        create(using)
    if [count("default", t) for t in ("shop_order", ATTEMPTS)] == [rows, history] and count(
        "empty", "shop_order"
    ):
        print(f"  reusing {rows:,} orders and {history:,} attempts")
        return
    # Orders with seq % 1000 in 980-990 are the due, scheduled and running ones: the empty table's.
    only_open = FILL_ORDERS.replace("FROM {seq}", "FROM {seq} WHERE MOD(seq, 1000) BETWEEN 980 AND 990")
    for using, orders in (("default", FILL_ORDERS), ("empty", only_open)):
        truncate(using)
        with connections[using].cursor() as cursor:
            if connections[using].vendor == "mysql":
                cursor.execute("SET @now = UTC_TIMESTAMP(6)")
            cursor.execute(fill_sql(FILL_CUSTOMERS, 5000))
        with without_indexes(using, [Order]):
            chunked(using, "orders", rows, lambda a, b, orders=orders: fill_sql(orders, b, a))
    with without_indexes("default", [QueueAttempt]):
        chunked("default", "attempt history", history, lambda a, b: fill_sql(FILL_ATTEMPTS, b, a))
    analyse(["shop_customer", "shop_order", ATTEMPTS])
    analyse(["shop_customer", "shop_order"], using="empty")


def fill_messages(purgeable: int, backlog: int) -> None:
    """``purgeable`` finished messages and a ``backlog`` of ready ones, in place of any."""
    truncate("default", [MESSAGES, "testapp_ledger"])
    chunked("default", "finished messages", purgeable, lambda a, b: messages_sql("succeeded", a, b))
    chunked("default", "message backlog", backlog, lambda a, b: messages_sql("ready", a, b))
    analyse([MESSAGES])


def truncate(using: str, tables: list[str] = TABLES) -> None:
    with connections[using].cursor() as cursor:
        if connections[using].vendor == "mysql":
            cursor.execute("SET FOREIGN_KEY_CHECKS = 0")
            for table in tables:
                cursor.execute(f"TRUNCATE {table}")
            cursor.execute("SET FOREIGN_KEY_CHECKS = 1")
        else:
            cursor.execute(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE")
