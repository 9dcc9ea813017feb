"""Random fair-share tables the tests compare the claim's order on (one place, so the bounded
read's and the turn-locking walk's tests rank the same kind of data)."""

from __future__ import annotations

import random

from django_dbqueue.fairness import rotation
from django_dbqueue.states import QueueState
from tests.testapp.models import FairJob


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
