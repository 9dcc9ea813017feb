"""The fair claim and the aging claim at 10,000,000 rows beside the same on the table with
nothing finished (issue #37: within 1.5x, as the plain claim's in ``queue_ops.claims``).

The shop's ``Order`` claims, for this step only, through the fair key ``customer`` (its fair
indexes added to both databases, as the system check asks of a fair model, and kept with
them), then apart with priority aging (30 s; ``QueueMixin``'s due index serves it). The model
is put back as it was after each mode."""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connections, models
from shop.models import Order

from bench.scale.queue_ops import ALIASES, claim_ms
from django_dbqueue.fairness import options

#: The indexes a fair model declares (tests/testapp's FairJob): the walk's, and the keys'.
FAIR_INDEXES = (
    models.Index(
        fields=["queue_state", "customer", "-queue_priority", "queue_run_at", "id"], name="scale_order_fair"
    ),
    models.Index(fields=["queue_state", "customer"], name="scale_order_fair_keys"),
)

MODES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("fair claim(100), key customer", {"queue_fair_key": "customer"}),
    ("aging claim(100), 30 s, none aged", {"queue_aging": 30}),
)


def add_fair_indexes() -> None:
    """The fair indexes on both tables, unless an earlier run added them (minutes at 10M)."""
    for using in ALIASES:
        connection = connections[using]
        with connection.cursor() as cursor:
            present = connection.introspection.get_constraints(cursor, Order._meta.db_table)
        for index in FAIR_INDEXES:
            if index.name not in present:
                started = time.perf_counter()
                with connection.schema_editor() as editor:
                    editor.add_index(Order, index)
                print(f"  {using}: index {index.name} in {time.perf_counter() - started:.0f} s", flush=True)


@contextmanager
def claiming_as(attributes: dict[str, Any]) -> Iterator[None]:
    """``Order`` with these class attributes for the block's claims, then as before."""
    before = {name: Order.__dict__.get(name) for name in attributes}
    for name, value in attributes.items():
        setattr(Order, name, value)
    options.fair_share_of.cache_clear()
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                delattr(Order, name)
            else:
                setattr(Order, name, value)
        options.fair_share_of.cache_clear()


def fair_claims(repeat: int) -> list[dict[str, Any]]:
    """Median ms per claim of 100 rows in each mode, the two tables in turn each round."""
    add_fair_indexes()
    out = []
    for name, attributes in MODES:
        with claiming_as(attributes):
            times: dict[str, list[float]] = {using: [] for using in ALIASES}
            for using in ALIASES:
                claim_ms(using, 100)  # warm-up: the statements built once per model
            for _ in range(repeat):
                for using in ALIASES:
                    times[using].append(claim_ms(using, 100))
        big, empty = (statistics.median(times[u]) for u in ALIASES)
        out.append({"what": name, "big": big, "empty": empty, "unit": "ms", "ratio": big / empty})
        print(f"  {name}: {big:.2f} ms at 10M vs {empty:.2f} ms empty ({big / empty:.2f}x)", flush=True)
    return out
