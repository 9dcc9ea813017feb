"""The fair order of a model's due rows: one SELECT with a window function, no locks.

Each key's due rows are numbered in the plain claim order (priority, due time, first in first
out), after the key's RUNNING rows (counted by a small read first). A row's fair rank is its
number divided by its key's weight: a key of weight 2 with nothing running has ranks 0.5, 1, 1.5..., a key of
weight 1 with one row running has 2, 3, 4. Rows are taken by fair rank, then round robin
among the keys (:mod:`.rotation`; a key's rows have ranks of their own, so that orders them
all). Not by priority across keys at equal rank: the bounded read (:mod:`.bounded`), which
walks keys in the round robin's order, could not honour it without reading every key's
head (a priority-10 head of a key far along the round robin would pass the heads before
it). So the rows in
flight are shared among the keys with work in proportion to their weights, across claims and
across workers: a key with 100,000 due rows gets its share of the workers, never all of them,
and a key that just got work is taken at its turn, within a few claims.

With aging, a row due for longer than the bound counts first inside its key (as if its
priority were the highest) and, at equal fair rank, before the others.

PostgreSQL refuses ``FOR UPDATE`` next to a window function, and a locking read of every due
row would lock them all on MySQL; so the ranking reads primary keys only, and
:mod:`.pick` locks the chosen rows by primary key with ``SKIP LOCKED``.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models import Case, Count, F, Q, Value, When, Window
from django.db.models.functions import Cast, RowNumber

from ..backends import DbNow, db_now_plus
from ..states import QueueState
from .options import FairShare
from .rotation import Turn, rotation_order
from .weights import weight_expression


def aged(fair: FairShare) -> Any:
    """1 for a row due longer than the aging bound (database clock), else 0."""
    if fair.aging is None:
        return Value(0)
    return Case(When(queue_run_at__lte=db_now_plus(-fair.aging), then=Value(1)), default=Value(0))


def fair_order(
    qs: models.QuerySet, fair: FairShare, window: int, turn: Turn | None = None
) -> list[tuple[Any, Any]]:
    """``(pk, key)`` of up to ``window`` due rows of ``qs``, in fair order (``turn``: the
    claim's, :func:`.rotation.take`; None reads it without a lock)."""
    assert fair.key is not None
    return list(fair_ranking(qs, fair, turn).values_list("pk", fair.key)[:window])


def fair_ranking(qs: models.QuerySet, fair: FairShare, turn: Turn | None = None) -> models.QuerySet:
    """The ranking SELECT (public to EXPLAIN it: bench/fair_claim.py)."""
    assert fair.key is not None
    within_key = [
        F("dbqueue_aged").desc(),
        F("queue_priority").desc(),
        F("queue_run_at").asc(),
        F("pk").asc(),
    ]
    number = Window(RowNumber(), partition_by=[F(fair.key)], order_by=within_key)
    return (
        qs.filter(queue_state=QueueState.READY, queue_run_at__lte=DbNow())
        .order_by()
        .annotate(
            dbqueue_aged=aged(fair),
            dbqueue_held=held(qs, fair.key),
            dbqueue_weight=weight_expression(qs.model, fair),
        )
        .annotate(dbqueue_fair=Cast(number + F("dbqueue_held"), models.FloatField()) / F("dbqueue_weight"))
        .order_by(
            "dbqueue_fair",
            "-dbqueue_aged",
            *rotation_order(qs.model, qs.db, fair.key, turn),
            "-queue_priority",
            "queue_run_at",
            "pk",
        )
    )


def held(qs: models.QuerySet, key: str) -> Any:
    """Each row's key's RUNNING rows (one small read: the running rows are few), as a CASE:
    they count against the key's share, so its due rows rank after them."""
    running = qs.filter(queue_state=QueueState.RUNNING).order_by().values(key).annotate(n=Count("pk"))
    whens = [
        When(Q(**{f"{key}__isnull": True}) if value is None else Q(**{key: value}), then=Value(n))
        for value, n in running.values_list(key, "n")
    ]
    if not whens:
        return Value(0)
    return Case(*whens, default=Value(0), output_field=models.IntegerField())
