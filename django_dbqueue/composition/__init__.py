"""Composition: jobs enqueued together (batches, with callbacks fired exactly once) and jobs that
run only after their parents (chains). docs/composition.md has the semantics.

``batch``, ``message`` and ``enqueue_after`` are the public names. Modules by concept:
``batches`` (the ``with batch()`` block and its callbacks), ``chains`` (dependencies between
jobs), ``hooks`` (what every final outcome calls in its own transaction: counters, callbacks,
promotions), ``extensions`` (what this wing adds to the engine: every end for good calls the
hooks, and every enqueue joins the open batch, through the engine's extension points, which
``extensions.register()`` fills from ``DbQueueConfig.ready()``). The wing stands on the engine
and imports no model of the public face (the app's tables only).
"""

from __future__ import annotations

from .batches import batch, message
from .chains import enqueue_after

__all__ = ["batch", "enqueue_after", "message"]
