"""Atomic mode's guard against a worker the network cut off.

An atomic handler runs inside a transaction that holds its row's lock; a rescuer's
``SKIP LOCKED`` passes the row by, lease or no lease, for as long as that transaction lives.
When the worker's host is cut off mid-job (a partition, a dead switch, a host frozen or
powered off) nothing reaches the server: no RST, no statement. The server keeps the session,
its transaction and its locks until it notices, which by default means ``wait_timeout``
(MariaDB/MySQL: 8 hours) or the kernel's TCP keepalive (about 2 hours and 11 minutes), so the row
sits RUNNING that long, even though the lease ran out long before. Measured with
``tests/chaos/netns`` (RELIABILITY.md, "Many hosts over a real network").

So a worker that runs atomic models asks the server, on each session it opens, to end the
session when it sits idle inside a transaction longer than a bound (MariaDB
``idle_transaction_timeout``, PostgreSQL ``idle_in_transaction_session_timeout``). The
transaction rolls back, the locks go, the rescue takes the rows, and when the host comes back
its commit fails: nothing of its late work is written. The bound is
``DBQUEUE_ATOMIC_IDLE_TIMEOUT``, by default twice the longest lease (or ``queue_timeout``) of
the atomic models served and at least 30 s, so a handler has its whole lease and more between
two statements.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.db import connections
from django.db.backends.signals import connection_created

from ..backends import backend_for
from ..conf import settings

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper

    from ..models import QueueMixin

logger = logging.getLogger("django_dbqueue.worker")

#: The default bound, in leases: a handler may run a whole lease and more between statements.
LEASES = 2
#: ... and never less than this (s): a pause of the process (a GC, swapping, SIGSTOP, a slow
#: lookup) must not cost a handler with a lease of a few seconds its transaction.
FLOOR = 30.0


def idle_bounds(
    models: Iterable[type[QueueMixin]], db_for: Callable[[type[QueueMixin]], str], lease: timedelta | None
) -> dict[str, float]:
    """Seconds of idle transaction allowed per database alias (only those with atomic models)."""
    chosen = settings.ATOMIC_IDLE_TIMEOUT
    bounds: dict[str, float] = {}
    for model in models:
        if not getattr(model, "queue_atomic", False):  # not a queue model: check_tables refuses it
            continue
        if chosen is not None:
            seconds = float(chosen)
        else:
            model_lease = (lease or model.queue_lease_seconds()).total_seconds()
            seconds = max(LEASES * model_lease, float(model.queue_timeout or 0), FLOOR)
        alias = db_for(model)
        bounds[alias] = max(bounds.get(alias, 0.0), seconds)
    return {alias: seconds for alias, seconds in bounds.items() if seconds > 0}


class IdleTransactionGuard:
    """Bounds the idle transactions of every session this process opens on ``bounds``'
    databases while it is installed (a worker's run); uninstalled, later sessions are left
    alone (the worker closes its own when it ends)."""

    def __init__(self, bounds: dict[str, float]) -> None:
        self.bounds = bounds
        self.unsupported: set[str] = set()

    @classmethod
    def for_models(
        cls,
        models: Iterable[type[QueueMixin]],
        db_for: Callable[[type[QueueMixin]], str],
        lease: timedelta | None,
        in_transaction: bool,
    ) -> IdleTransactionGuard:
        """The guard of a worker serving ``models`` (see :func:`idle_bounds`)."""
        # Inside a caller's transaction (a TestCase) the connection is not the worker's to bound.
        return cls({} if in_transaction else idle_bounds(models, db_for, lease))

    def install(self) -> None:
        if not self.bounds:
            return
        connection_created.connect(self._on_connect, dispatch_uid=id(self), weak=False)
        for alias in self.bounds:
            connection = connections[alias]
            if connection.connection is not None:  # opened before the worker started
                self._bound(connection)

    def uninstall(self) -> None:
        connection_created.disconnect(dispatch_uid=id(self))

    def _on_connect(self, sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
        if connection.alias in self.bounds and connection.alias not in self.unsupported:
            self._bound(connection)

    def _bound(self, connection: BaseDatabaseWrapper) -> None:
        seconds = self.bounds[connection.alias]
        if backend_for(connection.alias).bound_idle_transactions(connection, seconds):
            return
        self.unsupported.add(connection.alias)
        logger.warning(
            "database %r cannot bound idle transactions per session: an atomic worker cut off by the "
            "network keeps its rows locked until the server ends its session (wait_timeout, TCP "
            "keepalive); see the docs on network partitions",
            connection.alias,
        )
