"""The database seam: the only package that asks which database it is on.

``backend_for(alias)`` answers with a :class:`~.base.QueueBackend` for that connection;
the claim, the outcomes, the worker and the admin call its methods instead of comparing
vendor names.
"""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from django.db import OperationalError, connections

from ..conf import settings
from .base import QueueBackend, compiled
from .clock import DbNow, QueueTimeField, aware, db_now_plus, read_now
from .columns import Converter, column_converters, converted, quoted_column
from .inserts import insert_new
from .mysql import MySQLBackend
from .postgresql import PostgreSQLBackend
from .sqlite import SQLiteBackend

__all__ = [
    "Converter",
    "DbNow",
    "QueueBackend",
    "QueueTimeField",
    "aware",
    "backend_for",
    "column_converters",
    "compiled",
    "converted",
    "db_now_plus",
    "insert_new",
    "quoted_column",
    "read_now",
    "retry_on_lock_conflicts",
]

logger = logging.getLogger("django_dbqueue.backends")

T = TypeVar("T")

BACKENDS: dict[str, type[QueueBackend]] = {
    "mysql": MySQLBackend,
    "postgresql": PostgreSQLBackend,
    "sqlite": SQLiteBackend,
}


@functools.cache
def _backend(alias: str, vendor: str) -> QueueBackend:
    return BACKENDS.get(vendor, QueueBackend)(alias)


def backend_for(alias: str) -> QueueBackend:
    """The backend of database ``alias`` (by the connection's vendor, so third-party
    Django backends of a known vendor, e.g. ``mysql.connector.django``, are covered)."""
    return _backend(alias, connections[alias].vendor)


def retry_on_lock_conflicts(using: str, operation: Callable[[], T], what: str) -> T:
    """Run ``operation`` (one whole transaction), retrying deadlocks and lock-wait timeouts
    with jittered, growing pauses (``DBQUEUE_DEADLOCK_RETRIES`` times), and a claim whose
    prepared statement the session lost (``backend.must_run_again``).

    Inside a caller's transaction a retry is impossible (the transaction is already rolled
    back), so the error goes up unchanged there.
    """
    backend = backend_for(using)
    retries = settings.DEADLOCK_RETRIES
    for attempt in range(retries + 1):
        try:
            return operation()
        except OperationalError as exc:
            if attempt == retries or connections[using].in_atomic_block or not backend.must_run_again(exc):
                raise
            pause = random.uniform(0, 0.02 * 2**attempt)
            logger.info("%s must run again (%s); retry %d in %.3fs", what, exc, attempt + 1, pause)
            time.sleep(pause)
    raise AssertionError("unreachable")
