"""Recurring jobs: schedules declared in code, fired by ``runqueue``, edited in the admin.

``schedule`` (the decorator), ``fire_due``, ``fire_now`` and ``sync`` are the public names;
docs/schedules.md has the semantics across hosts. Modules by concept: ``slots`` (the slot
arithmetic: cron, intervals, time zones; it imports nothing of the package, so the schedule
table stands on it), ``declare`` (the decorator and ``DBQUEUE_SCHEDULES``), ``targets`` (what
a firing enqueues), ``firing`` (the ledger and the slots), ``syncing`` (code -> table, admin
edits). The worker's tick is ``django_dbqueue.worker.ticker``.

The decorator imports no models, so a task module may use it before the apps are ready.
"""

from __future__ import annotations

from typing import Any

from .declare import Declaration, declarations, schedule
from .slots import CatchUp, InvalidSchedule, Timing

__all__ = [
    "CatchUp",
    "Declaration",
    "InvalidSchedule",
    "Timing",
    "declarations",
    "fire_due",
    "fire_now",
    "schedule",
    "sync",
]


def __getattr__(name: str) -> Any:
    """``fire_due``, ``fire_now`` and ``sync`` use the models: imported when first asked for."""
    if name in ("fire_due", "fire_now"):
        from . import firing

        return getattr(firing, name)
    if name == "sync":
        from .syncing import sync

        return sync
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
