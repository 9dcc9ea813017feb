"""What fairness adds to the engine, registered into its extension points.

The engine (:mod:`django_dbqueue.queue`) sits below this wing and names what it asks in
:mod:`django_dbqueue.queue.extensions`; :func:`register` (called by ``DbQueueConfig.ready()``)
answers the claim's question of order: a model that declares a fair key or an aging bound
has its due rows taken fairly or oldest-aged first (:func:`~django_dbqueue.fairness.pick.locked_candidates`);
any other model gets the plain claim's one locking SELECT, unchanged.
"""

from __future__ import annotations

from ..queue import extensions
from .pick import locked_candidates


def register() -> None:
    """Register fairness into the engine; idempotent (each name replaces itself)."""
    extensions.claim_orders.register("fairness", locked_candidates)
