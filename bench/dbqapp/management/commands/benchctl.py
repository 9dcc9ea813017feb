"""Enqueue into, reset and inspect django_dbqueue's benchmark models (driven by bench/run.py).

Prints one JSON object on stdout.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from typing import Any

from django.apps import apps
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from bench.dbqapp.models import SAVE_PAIRS, WIDE_TABLES, PayloadJob
from bench.pairs import turn_order
from bench.park_wake import park_wake
from bench.payloads import payload
from django_dbqueue.models import WorkflowEvent, WorkflowProgress, WorkflowStep
from django_dbqueue.states import QueueState

HANDLER_READS = (
    "Handler_read_first",
    "Handler_read_key",
    "Handler_read_last",
    "Handler_read_next",
    "Handler_read_prev",
    "Handler_read_rnd",
    "Handler_read_rnd_next",
)


def handler_reads(cursor: Any) -> int:
    cursor.execute("SHOW SESSION STATUS LIKE 'Handler_read%%'")
    return sum(int(value) for name, value in cursor.fetchall() if name in HANDLER_READS)


def fill_finished(cursor: Any, table: str, count: int) -> None:
    """Add ``count`` finished (SUCCEEDED) wide rows to ``table`` by INSERT … SELECT from a sequence."""
    done = 0
    while done < count:
        step = min(200_000, count - done)
        cursor.execute(
            f"INSERT INTO {table} (queue_state, queue_priority, queue_run_at, queue_attempts, "
            "queue_last_error, queue_last_attempt_at, queue_locked_by, queue_locked_until, queue_token, "
            "queue_enqueued_at, queue_finished_at, customer_id, email, status, total, currency, "
            "shipping_address, notes, created_at, updated_at) "
            "SELECT 'succeeded', seq % 3, UTC_TIMESTAMP(6) - INTERVAL seq SECOND, 1, '', "
            "UTC_TIMESTAMP(6) - INTERVAL seq SECOND, 'fill', NULL, -seq, "
            "UTC_TIMESTAMP(6) - INTERVAL seq SECOND, UTC_TIMESTAMP(6) - INTERVAL seq SECOND, "
            "seq % 50000, CONCAT('customer', seq % 50000, '@example.com'), 'shipped', seq % 997, 'EUR', "
            "CONCAT('Street ', seq, ', 12345 Town, Country'), REPEAT('n', 120), "
            "UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) "
            f"FROM seq_1_to_{step}"
        )
        done += step


def claim_cost(levels: list[int], claims: int) -> dict[str, Any]:
    """Time ``claims`` claims of 100 rows per level, ours and raw SQL, the levels taking turns.

    Each level has its own table (``WIDE_TABLES``), filled first; then every round claims once
    from each table with django_dbqueue and once in raw SQL, so a slow minute of the shared
    machine (a claim is mostly its commit) falls on all levels alike instead of on one.
    """
    if len(levels) > len(WIDE_TABLES):
        raise CommandError(f"at most {len(WIDE_TABLES)} levels (one wide table each), got {levels}")
    models = WIDE_TABLES[: len(levels)]
    timings = {model: {"ours": [], "ours_reads": [], "raw": [], "raw_reads": []} for model in models}
    with connection.cursor() as cursor:
        for model, level in zip(models, levels, strict=True):
            table = model._meta.db_table
            cursor.execute(f"TRUNCATE TABLE {table}")
            fill_finished(cursor, table, level)
            with transaction.atomic():
                # 100 rows per timed claim, ours and raw, and 100 for the untimed claim below
                ready = (2 * claims + 1) * 100
                model.objects.bulk_create([model() for _ in range(ready)], batch_size=1000)
            cursor.execute(f"ANALYZE TABLE {table}")
            cursor.fetchall()
        overhead = -handler_reads(cursor) + handler_reads(cursor)
        with CaptureQueriesContext(connection) as captured:
            models[0].objects.claim(100, "bench-claim")  # untimed: the statement for EXPLAIN
        select_sql = next(q["sql"] for q in captured.captured_queries if "SKIP LOCKED" in q["sql"])
        for i in range(claims):
            order = list(models)
            random.shuffle(order)  # no level always right after another one's commit
            for model in order:
                times = timings[model]
                before = handler_reads(cursor)
                start = time.perf_counter()
                rows = model.objects.claim(100, "bench-claim")
                times["ours"].append((time.perf_counter() - start) * 1000)
                times["ours_reads"].append(handler_reads(cursor) - before - overhead)
                assert len(rows) == 100, len(rows)
                before = handler_reads(cursor)
                start = time.perf_counter()
                raw_claim(cursor, model._meta.db_table, i)
                times["raw"].append((time.perf_counter() - start) * 1000)
                times["raw_reads"].append(handler_reads(cursor) - before - overhead)
        out: dict[str, Any] = {"levels": [], "rounds": claims}
        for model, level in zip(models, levels, strict=True):
            table = model._meta.db_table
            level_sql = select_sql.replace(models[0]._meta.db_table, table)  # the same claim, its table
            cursor.execute("EXPLAIN " + level_sql.replace("FOR UPDATE SKIP LOCKED", ""))
            columns = [c[0] for c in cursor.description]
            plan = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
            cursor.execute(f"SELECT COUNT(*) FROM {table}")
            total = cursor.fetchone()[0]
            times = timings[model]
            out["levels"].append(
                {
                    "finished": level,
                    "table": table,
                    "rows": total,
                    "ms_per_claim": statistics.median(times["ours"]),
                    "reads_per_claim": statistics.median(times["ours_reads"]),
                    "raw_ms_per_claim": statistics.median(times["raw"]),
                    "raw_reads_per_claim": statistics.median(times["raw_reads"]),
                    # per round: this level's claim time over the first level's in the same round
                    "ratio_to_first": statistics.median(
                        mine / first
                        for mine, first in zip(times["ours"], timings[models[0]]["ours"], strict=True)
                    ),
                    "plan": [{k: p.get(k) for k in ("type", "key", "rows", "Extra")} for p in plan],
                    "sql": level_sql,
                }
            )
        for model in models:
            cursor.execute(f"TRUNCATE TABLE {model._meta.db_table}")
    return out


def raw_claim(cursor: Any, table: str, i: int) -> None:
    """The same claim in hand-written SQL: SELECT … SKIP LOCKED, UPDATE by id, commit."""
    with transaction.atomic():
        cursor.execute(
            f"SELECT id FROM {table} WHERE queue_state = 'ready' AND queue_run_at <= UTC_TIMESTAMP(6) "
            "ORDER BY queue_priority DESC, queue_run_at, id LIMIT 100 FOR UPDATE SKIP LOCKED"
        )
        ids = [row[0] for row in cursor.fetchall()]
        marks = ",".join(["%s"] * len(ids))
        cursor.execute(
            f"UPDATE {table} SET queue_state = 'running', queue_token = %s, queue_locked_by = 'raw', "
            "queue_locked_until = UTC_TIMESTAMP(6) + INTERVAL 300 SECOND, "
            f"queue_attempts = queue_attempts + 1 WHERE id IN ({marks})",
            [10**9 + i, *ids],
        )
    assert len(ids) == 100, len(ids)


#: The domain values of a new order in the save() pair (both models get the same).
ORDER_VALUES = {
    "customer_id": 4711,
    "email": "customer4711@example.com",
    "total": "129.90",
    "shipping_address": "Street 1, 12345 Town, Country",
    "notes": "leave at the door",
}


def save_pairs(n: int, turns: int) -> dict[str, Any]:
    """Time ``n`` saves of new rows of each pair's queue model and of its twin without
    QueueMixin, ``turns`` times, the two taking turns (who goes first alternates)."""
    connection.ensure_connection()  # connected before the clock starts
    out: dict[str, Any] = {}
    for name, (queue_model, plain_model) in SAVE_PAIRS.items():
        values = ORDER_VALUES if name == "order" else {}
        models = {"queue": queue_model, "plain": plain_model}
        seconds: dict[str, list[float]] = {"queue": [], "plain": []}
        for turn in range(turns):
            for side in turn_order(turn, "queue", "plain"):
                model = models[side]
                start = time.perf_counter()
                for _ in range(n):
                    model(**values).save()
                seconds[side].append(time.perf_counter() - start)
        out[name] = {
            "n": n,
            "queue_model": queue_model._meta.label,
            "plain_model": plain_model._meta.label,
            "queue_s": seconds["queue"],
            "plain_s": seconds["plain"],
        }
    return out


def enqueue_payloads(n: int) -> dict[str, Any]:
    """``bulk_enqueue()`` of ``n`` PayloadJob rows, each a mapping with its JSON payload (built
    inside the clock, as the raw loop builds its JSON text), 1,000 per INSERT, one transaction."""
    PayloadJob.objects.all().delete()
    connection.ensure_connection()  # as every system: connected before the clock starts
    start = time.perf_counter()
    PayloadJob.objects.bulk_enqueue([{"payload": payload(i)} for i in range(n)], batch_size=1000)
    return {
        "model": PayloadJob._meta.label,
        "n": n,
        "seconds": time.perf_counter() - start,
        "api": "bulk_enqueue() of mappings with a JSON payload each, 1,000 rows per INSERT",
    }


class Command(BaseCommand):
    help = "Benchmark control of django_dbqueue (reset, enqueue, save pairs, trickle, claim cost)."

    def add_arguments(self, parser):
        actions = [
            "reset",
            "enqueue-one",
            "enqueue-bulk",
            "save-pair",
            "trickle",
            "remaining",
            "claim-cost",
            "park-wake",
        ]
        parser.add_argument("action", choices=actions)
        parser.add_argument("--model", default="dbqapp.NoopJob")
        parser.add_argument("--n", type=int, default=0)
        parser.add_argument("--gap", type=float, default=0.15, help="mean gap of the trickle (s)")
        parser.add_argument("--levels", default="0,100000,1000000")
        parser.add_argument("--claims", type=int, default=20)
        parser.add_argument("--turns", type=int, default=10, help="turns of the save() pairs")
        parser.add_argument("--reset", action="store_true", help="empty the tables first")
        parser.add_argument(
            "--payload", action="store_true", help="enqueue-bulk: PayloadJob rows with JSON payloads"
        )

    def handle(self, *args, **options):
        model = apps.get_model(options["model"])
        action, n = options["action"], options["n"]
        out: dict[str, Any] = {"system": "dbqueue", "action": action, "model": model._meta.label}
        if action == "reset" or options["reset"]:
            with connection.cursor() as cursor:
                # The workflow tables too: TRUNCATE starts the pks again at 1, and a new row
                # must not find an old row's checkpoints under its pk.
                tables = (WorkflowStep, WorkflowEvent, WorkflowProgress)
                for m in (*apps.get_app_config("dbqapp").get_models(), *tables):
                    cursor.execute(f"TRUNCATE TABLE {m._meta.db_table}")
        if action == "reset":
            pass
        elif action == "enqueue-one":
            connection.ensure_connection()  # as every system: connected before the clock starts
            start = time.perf_counter()
            for _ in range(n):
                model().save()
            out.update(n=n, seconds=time.perf_counter() - start)
        elif action == "enqueue-bulk" and options["payload"]:
            out.update(enqueue_payloads(n))
        elif action == "enqueue-bulk":
            connection.ensure_connection()  # as every system: connected before the clock starts
            start = time.perf_counter()
            # Rows as mappings (each {}: every field takes its default), the fastest public
            # way to load work: no model instance per row. One transaction.
            model.objects.bulk_enqueue([{} for _ in range(n)], batch_size=1000)
            out.update(
                n=n,
                seconds=time.perf_counter() - start,
                api="bulk_enqueue() of mappings ({} per row), 1,000 rows per INSERT",
            )
        elif action == "save-pair":
            out["pairs"] = save_pairs(n, options["turns"])
        elif action == "trickle":
            sent = {}
            rng = random.Random(n)
            for _ in range(n):
                time.sleep(rng.uniform(0.5, 1.5) * options["gap"])
                row = model()
                row.save()
                sent[row.pk] = time.time()
            out["sent"] = sent
        elif action == "remaining":
            out["remaining"] = model.objects.exclude(queue_state=QueueState.SUCCEEDED).count()
        elif action == "claim-cost":
            levels = [int(x) for x in options["levels"].split(",")]
            out.update(claim_cost(levels, options["claims"]))
        elif action == "park-wake":
            out.update(park_wake(n))
        self.stdout.write(json.dumps(out, default=str))
