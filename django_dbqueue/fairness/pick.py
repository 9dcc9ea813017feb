"""The claim's locking SELECTs for a model with fair share or aging.

The claim (``queue.queryset``) asks :func:`locked_candidates` for its locked rows. A model
with neither option gets the plain claim's one SELECT. Otherwise, inside the claim's
transaction:

* aging alone: due rows waiting longer than the bound first, oldest first (one locking
  SELECT, index-driven with an index on ``(queue_state, queue_run_at)``, which a system check
  asks for), then the plain claim fills what is left;
* fair share: first the round robin's turn, locked until the commit (:func:`.rotation.take`:
  the claims of a model rank one after the other, each from where the last one stopped);
  then the fair order (without row locks: the keys' running rows, a small read, then the
  rows that can be offered, :mod:`.bounded`; or, on SQLite, with aging or with weights
  through the key's relation, one SELECT ranking every due row, :mod:`.ranking`), then the
  chosen rows locked by primary key with ``SKIP LOCKED``, a batch's worth at a time, until
  the batch is full or the candidates run out. Each statement locks only rows it takes, so
  a row some other transaction holds (an operator's bulk action, a claim through per-key
  limits' gate) is passed by instead of waited for, and a row that stopped being READY
  meanwhile is dropped by the re-checked WHERE. Last, one UPDATE moves the turn past the
  last key taken (:mod:`.rotation`).
"""

from __future__ import annotations

from typing import Any

from django.db import models

from ..backends import DbNow, backend_for, db_now_plus
from ..conf import settings
from . import rotation
from .bounded import bounded_order
from .options import FairShare, fair_share_of
from .ranking import fair_order

Candidate = tuple[Any, ...]  # (pk, token, database now, *also): what the claim locks


def locked_candidates(qs: Any, limit: int, also: tuple[str, ...] = ()) -> list[Candidate]:
    """Up to ``limit`` due rows of ``qs``, locked, in the model's claim order."""
    fair = fair_share_of(qs.model)
    if fair is None:
        return list(qs.claim_candidates(limit, *also))
    if fair.key is None:
        return _aged_first(qs, fair, limit, also)
    return _fair(qs, fair, limit, also)


def _locking(rows: models.QuerySet, also: tuple[str, ...]) -> models.QuerySet:
    locking = rows.select_for_update(skip_locked=True).annotate(dbqueue_now=DbNow())
    return locking.values_list("pk", "queue_token", "dbqueue_now", *also)


def _aged_first(qs: Any, fair: FairShare, limit: int, also: tuple[str, ...]) -> list[Candidate]:
    assert fair.aging is not None
    aged = qs.ready().filter(queue_run_at__lte=db_now_plus(-fair.aging)).order_by("queue_run_at", "pk")
    taken = list(_locking(aged, also)[:limit])
    if len(taken) < limit:
        rest = qs.exclude(pk__in=[row[0] for row in taken]) if taken else qs
        taken.extend(rest.claim_candidates(limit - len(taken), *also))
    return taken


def _bounded(qs: Any, fair: FairShare) -> bool:
    """Whether the fair order comes from the bounded read (:mod:`.bounded`): not for aging
    nor weights through the key's relation, nor on SQLite (one window SELECT there)."""
    return fair.aging is None and not isinstance(fair.weights, str) and backend_for(qs.db).bounded_fair


def _windows(bounded: bool, limit: int) -> list[int]:
    """How many rows of the fair order each pass offers: the bounded read first offers one
    per row wanted (all a lone claimer needs), then the full window if concurrent claimers
    took some; the ranking of every due row offers the full window at once."""
    full = limit * settings.FAIR_CANDIDATES
    return [limit, full] if bounded and full > limit else [full]


def _fair(qs: Any, fair: FairShare, limit: int, also: tuple[str, ...]) -> list[Candidate]:
    ready = qs.ready()
    taken: list[Candidate] = []
    key_of: dict[Any, Any] = {}
    bounded = _bounded(qs, fair)
    assert fair.key is not None
    turn = rotation.take(qs.model, qs.db, fair.key)
    for window in _windows(bounded, limit):
        order = bounded_order(qs, fair, window, turn) if bounded else fair_order(qs, fair, window, turn)
        fresh = [(pk, key) for pk, key in order if pk not in key_of]
        key_of.update(order)
        _lock_in_order(ready, fresh, limit, also, taken)
        if len(taken) >= limit:
            break
    if taken:
        rotation.served(qs.model, qs.db, key_of[taken[-1][0]])
    return taken


def _lock_in_order(
    ready: Any, order: list[tuple[Any, Any]], limit: int, also: tuple[str, ...], taken: list[Candidate]
) -> None:
    """Lock rows of ``order`` by primary key, a batch's worth at a time, into ``taken``."""
    start = 0
    while len(taken) < limit and start < len(order):
        chunk = [pk for pk, _ in order[start : start + limit - len(taken)]]
        start += len(chunk)
        chosen = backend_for(ready.db).with_pks(ready, chunk).order_by()
        locked = {row[0]: row for row in _locking(chosen, also)}
        taken.extend(locked[pk] for pk in chunk if pk in locked)
