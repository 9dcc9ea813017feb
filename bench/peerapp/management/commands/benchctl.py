"""Enqueue into, reset and inspect a peer queue through its own API (driven by bench/run.py).

Prints one JSON object on stdout.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction

SYSTEM = settings.SYSTEM
Q2_FUNC = "bench.peerapp.q2tasks.noop"


def _tables() -> list[str]:
    if SYSTEM == "tasksdb":
        return ["django_tasks_database_dbtaskresult"]
    if SYSTEM == "djqueue":
        return [t for t in connection.introspection.table_names() if t.startswith("dj_queue_")]
    return ["django_q_ormq", "django_q_task"]


def reset() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SET FOREIGN_KEY_CHECKS = 0")
        for table in _tables():
            cursor.execute(f"TRUNCATE TABLE {table}")
        cursor.execute("SET FOREIGN_KEY_CHECKS = 1")


def enqueue_one(job_id: int) -> None:
    """One job through the system's public enqueue API, committed on its own."""
    if SYSTEM == "q2":
        from django_q.tasks import async_task

        async_task(Q2_FUNC, job_id)
    else:
        from bench.peerapp.tasks import noop

        noop.enqueue(job_id)


class _Collector:
    """A django-q2 'broker' that keeps the signed packages async_task() builds."""

    list_key = "bench"

    def __init__(self) -> None:
        self.packages: list[Any] = []

    def enqueue(self, package: Any) -> int:
        self.packages.append(package)
        return len(self.packages)


def enqueue_bulk(first: int, n: int) -> str:
    """Many jobs at once, in one transaction; returns which API did it."""
    ids = range(first, first + n)
    if SYSTEM == "djqueue":
        from bench.peerapp.tasks import noop

        with transaction.atomic():
            noop.get_backend().enqueue_all([(noop, (i,), {}) for i in ids])
        return "enqueue_all() (public API)"
    if SYSTEM == "tasksdb":
        # django.tasks has no bulk enqueue: build the rows the backend's enqueue() writes.
        from django_tasks_db.models import DBTaskResult, get_date_max

        from bench.peerapp.tasks import noop

        backend = noop.get_backend()
        rows = []
        for i in ids:
            row = DBTaskResult(
                id=backend._get_id(),
                args_kwargs={"args": [i], "kwargs": {}},
                priority=noop.priority,
                task_path=noop.module_path,
                queue_name=noop.queue_name,
                run_after=noop.run_after or get_date_max(),  # what its pre_save does
                backend_name=backend.alias,
            )
            rows.append(row)
        with transaction.atomic():
            DBTaskResult.objects.bulk_create(rows, batch_size=1000)
        return "ORM bulk_create of DBTaskResult (no bulk API)"
    # django-q2: async_task() builds and signs the package, bulk_create stores them.
    from django.utils import timezone
    from django_q.models import OrmQ
    from django_q.tasks import async_task

    collector = _Collector()
    for i in ids:
        async_task(Q2_FUNC, i, broker=collector)
    now = timezone.now()
    with transaction.atomic():
        OrmQ.objects.bulk_create(
            [OrmQ(key=settings.Q_CLUSTER["name"], payload=p, lock=now) for p in collector.packages],
            batch_size=1000,
        )
    return "async_task() packages + ORM bulk_create (no bulk API)"


def remaining() -> int:
    if SYSTEM == "tasksdb":
        from django_tasks_db.models import DBTaskResult

        return DBTaskResult.objects.exclude(status="SUCCESSFUL").count()
    if SYSTEM == "djqueue":
        from dj_queue.models import Job

        return Job.objects.filter(finished_at__isnull=True).count()
    from django_q.models import OrmQ

    return OrmQ.objects.count()


class Command(BaseCommand):
    help = "Benchmark control of a peer queue (reset, enqueue, trickle, remaining)."

    def add_arguments(self, parser):
        parser.add_argument(
            "action", choices=["reset", "enqueue-one", "enqueue-bulk", "trickle", "remaining"]
        )
        parser.add_argument("--n", type=int, default=0)
        parser.add_argument("--first", type=int, default=1)
        parser.add_argument("--gap", type=float, default=0.15, help="mean gap of the trickle (s)")
        parser.add_argument("--reset", action="store_true", help="empty the tables first")

    def handle(self, *args, **options):
        action, n, first = options["action"], options["n"], options["first"]
        out: dict[str, Any] = {"system": SYSTEM, "action": action}
        if action == "reset" or options["reset"]:
            reset()
        if action == "reset":
            pass
        elif action == "enqueue-one":
            enqueue_one(first - 1)  # warm up: imports, connection (job id first-1 is not counted)
            start = time.perf_counter()
            for i in range(first, first + n):
                enqueue_one(i)
            out.update(n=n, seconds=time.perf_counter() - start)
        elif action == "enqueue-bulk":
            connection.ensure_connection()  # as every system: connected before the clock starts
            start = time.perf_counter()
            out["api"] = enqueue_bulk(first, n)
            out.update(n=n, seconds=time.perf_counter() - start)
        elif action == "trickle":
            sent = {}
            rng = random.Random(first)
            for i in range(first, first + n):
                time.sleep(rng.uniform(0.5, 1.5) * options["gap"])
                enqueue_one(i)
                sent[i] = time.time()
            out["sent"] = sent
        elif action == "remaining":
            out["remaining"] = remaining()
        else:  # pragma: no cover
            raise CommandError(action)
        self.stdout.write(json.dumps(out))
