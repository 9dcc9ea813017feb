"""Tables the fairness tests claim from, in one place: random fair-share tables (so the bounded
read's and the turn-locking walk's tests rank the same kind of data), and aged rows beside
fresh ones of a higher priority."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

from django.db.models import F

from django_dbqueue.fairness import rotation
from django_dbqueue.states import QueueState
from tests.testapp.models import AgedJob, FairJob


def fill(seed: int, turn_chance: float = 0.7) -> None:
    """Keys of very different sizes, priorities within and across keys, rows in flight, the
    weighted key "gold" (3), and, with ``turn_chance``, a turn somewhere in the middle."""
    rng = random.Random(seed)
    names = [f"k{n:02}" for n in range(rng.randint(3, 40))] + ["gold"]
    rows = [
        FairJob(customer=rng.choice(names), queue_priority=rng.choice((0, 0, 0, 5, 10)))
        for _ in range(rng.randint(50, 400))
    ]
    FairJob.objects.bulk_create(rows)
    running = rng.sample([row.pk for row in rows], k=rng.randint(0, 20))
    FairJob.objects.filter(pk__in=running).update(queue_state=QueueState.RUNNING)
    if rng.random() < turn_chance:
        rotation.served(FairJob, "default", rng.choice(names))


def aged_and_fresh(aged: int, fresh: int, rows: Any = None) -> tuple[list[AgedJob], list[AgedJob]]:
    """``aged`` priority-0 rows due an hour ago (past any bound) and ``fresh`` priority-10 rows
    due now, in ``rows`` (a manager or QuerySet: AgedJob's, on the default database)."""
    rows = AgedJob.objects if rows is None else rows
    old = rows.bulk_create([AgedJob(customer="old", queue_priority=0) for _ in range(aged)])
    rows.filter(pk__in=[row.pk for row in old]).update(queue_run_at=F("queue_run_at") - timedelta(hours=1))
    return old, rows.bulk_create([AgedJob(customer="new", queue_priority=10) for _ in range(fresh)])
