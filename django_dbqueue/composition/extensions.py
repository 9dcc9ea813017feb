"""What composition adds to the engine, registered into its extension points.

The engine (:mod:`django_dbqueue.queue`) sits below this wing and names what it asks in
:mod:`django_dbqueue.queue.extensions`; :func:`register` (called by
``DbQueueConfig.ready()``) answers: an enqueue joins the open ``with batch()`` block (and
stamps the trace context), and every end for good moves its batch's counters and settles its
dependants (:func:`django_dbqueue.composition.hooks.finished`), in the transaction that
writes the end; a row's ``enqueue(after=…)`` is a chain's
(:func:`django_dbqueue.composition.chains.enqueue_after`).
"""

from __future__ import annotations

from ..queue import extensions
from . import chains, hooks


def register() -> None:
    """Register composition into the engine; idempotent (each name replaces itself)."""
    extensions.enqueue_stamps.register("composition", hooks.stamp)
    extensions.value_stamps.register("composition", hooks.stamp_values)
    extensions.ended.register("composition", hooks.finished)
    extensions.enqueue_after.register("chains", chains.enqueue_after)
