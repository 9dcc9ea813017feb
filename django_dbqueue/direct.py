"""Statements sent on a kept backend cursor, past Django's cursor layers.

For every statement, Django's ``connection.cursor()`` makes a new driver cursor and two
wrappers around it, and its ``execute()`` runs the chain of execute wrappers and, with
``DEBUG`` or ``assertNumQueries``, the query log. Two statements of this package run so often
that those layers are a visible share of their cost: the INSERT of a new row (``save()``) and
the block that ends an atomic-mode job (:mod:`django_dbqueue.pipeline`). Where nothing would
see the difference (:func:`unobserved`), they go on a cursor of the backend's kept per driver
connection, after the checks Django's ``cursor()`` makes (health check, connection, thread,
broken transaction) and with its error translation (``wrap_database_errors`` and the
backend's own cursor wrapper, which MySQL needs for its integrity errors).
"""

from __future__ import annotations

from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

#: Set on this package's own execute wrappers: bookkeeping that a caller of
#: :func:`unobserved` may know it can pass by (see pipeline.CommitCarrier).
BOOKKEEPING = "dbqueue_bookkeeping"


def unobserved(connection: BaseDatabaseWrapper, bookkeeping_too: bool = False) -> bool:
    """Whether a statement sent past Django's cursor would go unseen: no query log and no
    execute wrapper (with ``bookkeeping_too``, none but this package's bookkeeping)."""
    if connection.queries_logged:
        return False
    if bookkeeping_too:
        return all(getattr(wrapper, BOOKKEEPING, False) for wrapper in connection.execute_wrappers)
    return not connection.execute_wrappers


def execute(connection: BaseDatabaseWrapper, sql: str) -> Any:
    """Send ``sql`` (complete text, no parameters) on the kept cursor; returns that cursor
    (``rowcount``, ``lastrowid``). Only where :func:`unobserved` says so."""
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    connection.validate_thread_sharing()
    connection.validate_no_broken_transaction()
    driver = connection.connection
    kept = connection.__dict__.get("_dbq_kept_cursor")
    with connection.wrap_database_errors:
        if kept is None or kept[0] is not driver:
            kept = connection._dbq_kept_cursor = (driver, connection.create_cursor())
        cursor = kept[1]
        cursor.execute(sql)
    return cursor
