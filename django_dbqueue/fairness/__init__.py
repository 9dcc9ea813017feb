"""Fair share and priority aging: the order a claim takes due rows in (issue #37).

Modules by concept: ``options`` (what a model declares: ``queue_fair_key``,
``queue_fair_weights``, ``queue_aging``, checked by system checks), ``weights`` (a key's
weight, from a mapping, a callable or a column reached through the key), ``rotation`` (the
round robin among keys at the same rank, kept in ``QueueFairTurn``), ``bounded`` (the fair
order from the rows that can be offered: the keys walked in the round robin's order with
their first rows, read by ``heads``), ``ranking`` (the same order as one window-function
SELECT over every due row: SQLite, aging with a key, weights through the key's relation),
``pick`` (the claim's locking SELECTs in that order). The claim calls
:func:`pick.locked_candidates` through the engine's
``claim_orders`` extension point (``fairness/extensions.py``, registered by
``DbQueueConfig.ready()``); flow control's per-key limits call it directly. A model that
declares none of these options gets the plain claim's single locking SELECT, unchanged.

A feature wing above the engine: it imports the app's foundation, ``backends`` and the
app's tables, and works on the QuerySet the claim hands it.
"""

from __future__ import annotations

from .options import FairShare, fair_share_of
from .pick import locked_candidates

__all__ = ["FairShare", "fair_share_of", "locked_candidates"]
