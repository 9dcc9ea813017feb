"""What a worker does while its database is unavailable: restarted, unreachable, a killed
session, or switched to read-only (a replica, a fail-over under way).

None of it is a handler's fault, and none of it loses a row: the rows the worker held come
back through their leases. So the worker logs one clear line, closes its connections and tries
again after a growing pause, jittered so that a fleet does not return in the same instant.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable
from typing import TYPE_CHECKING

from django.db import DatabaseError, InterfaceError, OperationalError, connections

from ..backends import backend_for
from .tables import check_tables

if TYPE_CHECKING:
    from .loop import Worker

logger = logging.getLogger("django_dbqueue.worker")

#: The longest pause between two attempts, in seconds (before jitter).
LONGEST_PAUSE = 10.0


def is_outage(exc: DatabaseError, databases: Iterable[str]) -> bool:
    """A lost or refused connection, or a server that refuses writes for now."""
    if isinstance(exc, (OperationalError, InterfaceError)):
        return True
    return any(backend_for(alias).is_read_only(exc) for alias in databases)


def close_connections() -> None:
    """Close this thread's connections. One that a handler closed under Django's feet
    (``connection.connection.close()``) raises as Django closes it again; Django has let go of
    it all the same, and the others must still be closed."""
    for connection in connections.all(initialized_only=True):
        try:
            connection.close()
        except DatabaseError:
            pass


def wait_it_out(worker: Worker, exc: DatabaseError, failures: int) -> None:
    pause = min(0.25 * 2**failures, LONGEST_PAUSE) * random.uniform(0.5, 1.5)
    if any(backend_for(alias).is_read_only(exc) for alias in worker.databases()):
        logger.warning(
            "worker %s: the database is read-only (a replica, or a fail-over under way): %s; "
            "trying again in %.1fs",
            worker.worker_id,
            str(exc).strip(),
            pause,
        )
    else:
        logger.warning("worker %s: database error (%s); reconnecting in %.1fs", worker.worker_id, exc, pause)
    close_connections()
    worker.stopping_event.wait(pause)
    try:
        # A queue table that is gone is a set-up error, not an outage (SQLite reports it as
        # an OperationalError): ImproperlyConfigured instead of reconnecting forever.
        check_tables(worker.models, worker.database)
    except (OperationalError, InterfaceError):
        pass  # still unreachable: keep waiting
