"""Enqueue speed against raw SQL on MariaDB, in interleaved rounds (issue #33's enqueue floors).

    .venv/bin/python bench/enqueue_speed.py [--rounds 5] [--saves 400] [--bulk 10000]

One by one, each round times in turns (the order rotates every round):

* ``raw``: an autocommit ``INSERT`` of an order row (the queue model's columns, the queue times
  from ``UTC_TIMESTAMP(6)``) through mysqlclient, no Django;
* ``plain``: ``save()`` of a new ``PlainOrder`` (the same domain fields, no QueueMixin);
* ``queue``: ``save()`` of a new ``OrderJob`` (the order that is a queue).

In bulk, 1,000 rows per statement with JSON payloads into the ``Message`` table:

* ``raw``: one multi-row INSERT per 1,000 rows through mysqlclient, only what varies (queue,
  kind, payload) as parameters and the rest literals, the queue times ``UTC_TIMESTAMP(6)``,
  ``json.dumps`` of each payload included, one transaction;
* ``raw_params``: the same INSERT with every value ``bulk_enqueue()`` sends as a parameter (its
  constants too: the package writes no SQL literals), each constant one named parameter that
  every row uses, as ``bulk_enqueue()`` sends them, so the ratio to it is the package's own
  cost and the ratio of the two raw sides the driver's quoting of the parameters;
* ``bulk_enqueue``: ``Message.objects.bulk_enqueue()`` of ``{"kind", "payload"}`` mappings.

Prints each side's median microseconds and CPU microseconds per row, and the medians of the
within-round ratios. Uses its own database (``BENCH_DB_NAME``, default bench_enqueue_speed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("BENCH_SYSTEM", "dbqueue")
os.environ.setdefault("BENCH_DB_NAME", "bench_enqueue_speed")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")

import django

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from bench import ledger  # noqa: E402
from bench.dbqapp.management.commands.benchctl import ORDER_VALUES  # noqa: E402
from bench.dbqapp.models import OrderJob, PlainOrder  # noqa: E402
from django_dbqueue.models import Message  # noqa: E402

DB = os.environ["BENCH_DB_NAME"]
PAYLOAD = {"to": "customer4711@example.com", "template": "welcome", "lines": [1, 2, 3], "vip": True}

RAW_ORDER = (
    "INSERT INTO {table} (customer_id, email, status, total, currency, shipping_address, notes, "
    "created_at, updated_at, queue_state, queue_priority, queue_run_at, queue_attempts, "
    "queue_last_error, queue_enqueued_at, queue_dependants) VALUES (%s, %s, 'new', %s, 'EUR', %s, %s, "
    "UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), 'ready', 0, UTC_TIMESTAMP(6), 0, '', UTC_TIMESTAMP(6), 0)"
)
RAW_MESSAGE = (
    "INSERT INTO {table} (queue, kind, payload, `group`, expects_reply, queue_state, queue_priority, "
    "queue_run_at, queue_attempts, queue_last_error, queue_enqueued_at, queue_dependants) VALUES "
)
#: One row of the raw multi-row INSERT: what varies as parameters, the rest literals.
RAW_MESSAGE_ROW = "(%s, %s, %s, '', 0, 'ready', 0, UTC_TIMESTAMP(6), 0, '', UTC_TIMESTAMP(6), 0)"
#: One row with every value bulk_enqueue() sends as a parameter: what varies per row (``{n}``:
#: the row's number), the constants named once for all rows (queue_dependants is left to its
#: db_default there, so it is a literal here).
RAW_MESSAGE_PARAMS_ROW = (
    "(%(queue)s, %(kind{n})s, %(payload{n})s, %(group)s, %(expects_reply)s, %(state)s, %(priority)s, "
    "UTC_TIMESTAMP(6), %(attempts)s, %(last_error)s, UTC_TIMESTAMP(6), 0)"
)


def timed(work: Callable[[], None]) -> tuple[float, float]:
    """Wall and CPU seconds of ``work``."""
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    return time.perf_counter() - wall, time.process_time() - cpu


def one_by_one(n: int, raw_cursor: object) -> dict[str, Callable[[], None]]:
    values = ORDER_VALUES
    raw_sql = RAW_ORDER.format(table=OrderJob._meta.db_table)
    raw_params = (
        values["customer_id"],
        values["email"],
        values["total"],
        values["shipping_address"],
        values["notes"],
    )

    def raw() -> None:
        for _ in range(n):
            raw_cursor.execute(raw_sql, raw_params)  # type: ignore[attr-defined]

    def plain() -> None:
        for _ in range(n):
            PlainOrder(**values).save()

    def queue() -> None:
        for _ in range(n):
            OrderJob(**values).save()

    return {"raw": raw, "plain": plain, "queue": queue}


def bulk(n: int, raw_connection: object) -> dict[str, Callable[[], None]]:
    raw_sql = RAW_MESSAGE.format(table=Message._meta.db_table)

    def raw_insert(row_sql: str) -> Callable[[], None]:
        def run() -> None:
            cursor = raw_connection.cursor()  # type: ignore[attr-defined]
            cursor.execute("START TRANSACTION")
            for first in range(0, n, 1000):
                count = min(1000, n - first)
                params: list[object] = []
                for i in range(count):
                    params += ["default", "bench.mail", json.dumps(dict(PAYLOAD, n=first + i))]
                cursor.execute(raw_sql + ", ".join([row_sql] * count), params)
            cursor.execute("COMMIT")

        return run

    @cache
    def named_sql(count: int) -> str:  # built once per batch size, as bulk_enqueue() does
        return raw_sql + ", ".join(RAW_MESSAGE_PARAMS_ROW.format(n=i) for i in range(count))

    def raw_named() -> None:
        cursor = raw_connection.cursor()  # type: ignore[attr-defined]
        cursor.execute("START TRANSACTION")
        for first in range(0, n, 1000):
            count = min(1000, n - first)
            params: dict[str, object] = dict(constants)
            for i in range(count):
                params[f"kind{i}"] = "bench.mail"
                params[f"payload{i}"] = json.dumps(dict(PAYLOAD, n=first + i))
            cursor.execute(named_sql(count), params)
        cursor.execute("COMMIT")

    def ours() -> None:
        rows = [{"kind": "bench.mail", "payload": dict(PAYLOAD, n=i)} for i in range(n)]
        Message.objects.bulk_enqueue(rows, batch_size=1000)

    constants: dict[str, object] = {
        "queue": "default",
        "group": "",
        "expects_reply": False,
        "state": "ready",
        "priority": 0,
        "attempts": 0,
        "last_error": "",
    }
    return {
        "raw": raw_insert(RAW_MESSAGE_ROW),
        "raw_params": raw_named,
        "bulk_enqueue": ours,
    }


def rounds(
    sides: dict[str, Callable[[], None]], count: int, rows: int
) -> dict[str, list[tuple[float, float]]]:
    """Each side's (µs per row, CPU µs per row) per round, the order rotating every round."""
    names = list(sides)
    seen: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    for number in range(count):
        order = names[number % len(names) :] + names[: number % len(names)]
        for name in order:
            wall, cpu = timed(sides[name])
            seen[name].append((wall * 1e6 / rows, cpu * 1e6 / rows))
    return seen


def report(
    title: str, seen: dict[str, list[tuple[float, float]]], ratios: dict[str, tuple[str, str]]
) -> None:
    print(f"{title}")
    for name, turns in seen.items():
        wall = statistics.median(t[0] for t in turns)
        cpu = statistics.median(t[1] for t in turns)
        print(f"  {name:>13}: {wall:8.1f} µs per row, {cpu:8.1f} µs CPU per row")
    for label, (top, bottom) in ratios.items():
        within = [a[0] / b[0] for a, b in zip(seen[top], seen[bottom], strict=True)]
        # CPU of this process: it moves less with the shared machine's load than wall time.
        cpu = [a[1] / b[1] for a, b in zip(seen[top], seen[bottom], strict=True)]
        print(
            f"  {label}: {statistics.median(within):.2f}, in CPU {statistics.median(cpu):.2f} "
            f"(medians of {len(within)} rounds)"
        )


def setup() -> object:
    server = ledger.connect(None)
    server.cursor().execute(f"CREATE DATABASE IF NOT EXISTS {DB}")
    server.close()
    call_command("migrate", verbosity=0)
    raw = ledger.connect(DB)
    for model in (OrderJob, PlainOrder, Message):
        raw.cursor().execute(f"TRUNCATE TABLE {model._meta.db_table}")
    return raw


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--saves", type=int, default=400, help="rows per side per round, one by one")
    parser.add_argument("--bulk", type=int, default=10_000, help="rows per side per round, in bulk")
    args = parser.parse_args()
    raw = setup()
    connection.ensure_connection()
    load = os.getloadavg()[0]
    print(f"MariaDB {connection.mysql_server_info}, Django {django.get_version()}, load {load:.2f}")
    seen = rounds(one_by_one(args.saves, raw.cursor()), args.rounds, args.saves)  # type: ignore[attr-defined]
    report(
        f"one by one, {args.saves} rows per side per round",
        seen,
        {
            "rate ratio, queue save() / raw INSERT": ("raw", "queue"),
            "time ratio, queue / plain save()": ("queue", "plain"),
        },
    )
    seen = rounds(bulk(args.bulk, raw), args.rounds, args.bulk)
    report(
        f"bulk, {args.bulk} rows per side per round, 1,000 per INSERT, JSON payloads",
        seen,
        {
            "rate ratio, bulk_enqueue() / raw multi-row INSERT": ("raw", "bulk_enqueue"),
            "rate ratio, bulk_enqueue() / raw with its parameters": ("raw_params", "bulk_enqueue"),
        },
    )
    print(f"load at the end {os.getloadavg()[0]:.2f} (a shared machine: other processes run beside)")


if __name__ == "__main__":
    main()
