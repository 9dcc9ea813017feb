"""Flow control: what may be claimed and when (docs/flow-control.md, docs/unique-and-cancel.md).

Modules by concept: ``pauses`` (a paused model or queue is held back by every claim),
``limits`` (concurrency and rate limits per key, enforced at claim time), ``unique`` (one
active row per key: ``QueueUniqueKey``, ``enqueue_unique``), ``cancellation`` (asking a
running job to stop), and ``extensions`` (what this wing adds to the engine: the claim, the
outcome path and the rescue call into it through the engine's extension points, which
``extensions.register()`` fills from ``DbQueueConfig.ready()``). The wing stands on the
engine and imports no model of the public face (the app's tables only).

``pause``, ``resume`` and ``is_paused`` are also ``django_dbqueue.pause`` etc.
"""

from __future__ import annotations

from .pauses import is_paused, pause, resume
from .unique import QueueUniqueKey, enqueue_unique

__all__ = ["QueueUniqueKey", "enqueue_unique", "is_paused", "pause", "resume"]
