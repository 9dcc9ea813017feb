"""How many database sessions ``runqueue`` opens, and whether the server has room for them.

Each worker process holds two sessions: its own (claims, handlers, outcomes) and its lease
keeper's (renewals and heartbeats, which must not wait behind a long job). A worker that
listens for wake-ups (PostgreSQL, not ``--burst``) holds a third. The supervisor holds one
while it starts and watches its workers, and the schedule ticker of its first worker one.
A fleet that would not fit gets a warning at start: it would still run (a worker that
cannot connect waits and tries again), but every other client of the server would be
refused too.
"""

from __future__ import annotations

import logging

from ..backends import backend_for

logger = logging.getLogger("django_dbqueue.worker")

#: The share of the server's free sessions a fleet may take before ``runqueue`` warns.
COMFORTABLE = 0.8


def sessions_needed(concurrency: int, using: str, burst: bool, schedules: bool = False) -> int:
    per_worker = 2 + (1 if backend_for(using).can_notify and not burst else 0)
    return concurrency * per_worker + 1 + (1 if schedules and not burst else 0)


def room_warning(concurrency: int, using: str, burst: bool, schedules: bool = False) -> str | None:
    """A warning when the fleet would take most of the sessions the server has left."""
    room = backend_for(using).session_room()
    if room is None:
        return None
    used, limit = room
    needed = sessions_needed(concurrency, using, burst, schedules)
    free = max(limit - used, 0)
    if needed <= COMFORTABLE * free:
        return None
    return (
        f"runqueue --concurrency {concurrency} opens about {needed} database sessions (2 per worker "
        f"process{', 3 with LISTEN' if backend_for(using).can_notify and not burst else ''}, 1 for the "
        f"supervisor{', 1 for the schedule ticker' if schedules and not burst else ''}); "
        f"database {using!r} has {free} of its {limit} free. Workers that cannot connect wait and "
        "try again, but other clients would be refused too: lower --concurrency or raise the "
        "server's max_connections."
    )
