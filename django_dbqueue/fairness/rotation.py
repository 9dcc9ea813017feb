"""Round robin among keys at the same fair rank: claims start after the key served last.

The fair rank shares the rows in flight (:mod:`.ranking`); when nothing of several keys is in
flight (short jobs finish between two claims), their rows tie at the same rank, and a fixed
tie-break (the oldest head first, or the smallest key) would serve the same keys claim after
claim. So ties go to the keys after the one the model's last claim served last, wrapping
around: over a few claims every key with work gets its turn, however many rows the others
have, whichever host claims.

Where the turn stands is one ``QueueFairTurn`` row per model, read without a lock when the
claim ranks and moved by one UPDATE at the end of the claim.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models import Case, F, Q, Value, When

from ..tables.fairness import QueueFairTurn


def _turns(model: type[models.Model], using: str) -> models.QuerySet:
    return QueueFairTurn._default_manager.using(using).filter(model=model._meta.label)


def last_served(model: type[models.Model], using: str, key: str) -> tuple[bool, Any]:
    """Whether the model has a turn, and the key its last claim served last (one small read)."""
    text = _turns(model, using).values_list("last_key", flat=True).first()
    if not text:
        return False, None
    try:
        return True, model._meta.get_field(key).to_python(text)  # type: ignore[union-attr]
    except Exception:  # noqa: BLE001 - a turn that does not read back starts from the first key
        return False, None


def rotation_order(model: type[models.Model], using: str, key: str) -> list[Any]:
    """Order expressions: keys after the last one served first, then the rest, by key."""
    by_key = F(key).asc()
    served, last = last_served(model, using, key)
    if not served:
        return [by_key]
    after = Case(When(Q(**{f"{key}__gt": last}), then=Value(0)), default=Value(1))
    return [after.asc(), by_key]


def served(model: type[models.Model], using: str, last: Any) -> None:
    """Move the turn past ``last``, the last key a claim took (a None key moves nothing)."""
    if last is None:
        return
    text = str(last)[:255]
    if not _turns(model, using).update(last_key=text):
        QueueFairTurn._default_manager.using(using).bulk_create(
            [QueueFairTurn(model=model._meta.label, last_key=text)], ignore_conflicts=True
        )
