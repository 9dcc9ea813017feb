"""Running consumers: the worker loop, its lease keeper, batch sizing and the supervisor
of ``runqueue --concurrency N``.

``Worker`` is importable from here; the modules are by concept: ``loop`` (the worker: poll,
claim, execute, record), ``executor`` (one claim's rows run: ``claimed`` is what both modes
share, ``leased`` and ``atomic`` the modes; it returns outcomes, written by ``record()``),
``calls`` (the handler call), ``lease`` (the keeper thread), ``stop`` (the stop flag),
``shutdown`` (signals), ``outage`` (a database that is down), ``idle`` (atomic mode's bound on
idle transactions), ``leaks`` (transactions a handler left open), ``sizing``, ``supervisor``,
``children`` (its worker processes: groups, pipes, exits), ``progress``, ``registry``
(heartbeats), ``wakeup`` (LISTEN), ``tables`` (set-up checks), ``startup`` (stop signals while
``runqueue`` starts).

Only ``loop`` and the ``supervisor``'s ``children`` (which create it) know ``Worker``: the
rest take the few values they use.

``Worker`` is imported on first use, not with this package: ``startup`` is imported while
Django's app registry is still being filled, before any model may be imported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .loop import Worker, WorkerStats

__all__ = ["Worker", "WorkerStats"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import loop

        return getattr(loop, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
