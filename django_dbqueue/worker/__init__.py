"""Running consumers: the worker loop, its lease keeper, batch sizing and the supervisor
of ``runqueue --concurrency N``.

``Worker`` is importable from here; the modules are by concept: ``loop`` (the worker),
``jobs`` (one claimed batch), ``lease`` (the keeper thread), ``sizing``, ``supervisor``,
``progress``, ``registry`` (heartbeats), ``wakeup`` (LISTEN), ``tables`` (set-up checks).
"""

from __future__ import annotations

from .loop import Worker, WorkerStats

__all__ = ["Worker", "WorkerStats"]
