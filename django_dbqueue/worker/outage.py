"""What a worker does while its database is unavailable: restarted, unreachable, a killed
session, or switched to read-only (a replica, a fail-over under way).

None of it is a handler's fault, and none of it loses a row: the rows the worker held come
back through their leases. So the worker logs one clear line, closes its connections and tries
again after a growing pause, jittered so that a fleet does not return in the same instant.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db import DatabaseError, InterfaceError, OperationalError, connections

from ..backends import backend_for
from .stop import StopFlag
from .tables import check_tables

if TYPE_CHECKING:
    from ..models import QueueMixin

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


@dataclass(frozen=True)
class Outages:
    """How worker ``worker_id`` rides out the outages of its ``databases``."""

    worker_id: str
    models: Sequence[type[QueueMixin]]
    #: The worker's ``--database``, if it named one: where its tables are checked.
    database: str | None
    databases: Sequence[str]
    stop: StopFlag
    #: Inside a caller's transaction (a TestCase) an error is the caller's: none is waited out.
    in_transaction: bool = False

    def ride_out(self, exc: DatabaseError, failures: int) -> bool:
        """Wait out ``exc``, the ``failures``-th in a row, if it is an outage; False if it is
        not one (the caller raises it)."""
        if self.in_transaction or not is_outage(exc, self.databases):
            return False
        self.wait_it_out(exc, failures)
        return True

    def wait_it_out(self, exc: DatabaseError, failures: int) -> None:
        pause = min(0.25 * 2**failures, LONGEST_PAUSE) * random.uniform(0.5, 1.5)
        if any(backend_for(alias).is_read_only(exc) for alias in self.databases):
            logger.warning(
                "worker %s: the database is read-only (a replica, or a fail-over under way): %s; "
                "trying again in %.1fs",
                self.worker_id,
                str(exc).strip(),
                pause,
            )
        else:
            logger.warning(
                "worker %s: database error (%s); reconnecting in %.1fs", self.worker_id, exc, pause
            )
        close_connections()
        self.stop.wait(pause)
        try:
            # A queue table that is gone is a set-up error, not an outage (SQLite reports it as
            # an OperationalError): ImproperlyConfigured instead of reconnecting forever.
            check_tables(self.models, self.database)
        except (OperationalError, InterfaceError):
            pass  # still unreachable: keep waiting
