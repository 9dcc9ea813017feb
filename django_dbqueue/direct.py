"""Statements sent straight on the driver's connection, past Django's cursor layers.

For every statement, Django's ``connection.cursor()`` makes a new driver cursor and two
wrappers around it, and its ``execute()`` runs the chain of execute wrappers and, with
``DEBUG`` or ``assertNumQueries``, the query log; the driver's cursor then keeps books on a
result. Two statements of this package run so often that those layers are a visible share of
their cost, and neither has a result set: the INSERT of a new row (``save()``) and the block
that ends an atomic-mode job (:mod:`django_dbqueue.pipeline`), both complete text without
parameters on MySQL/MariaDB. Where nothing would see the difference (:func:`unobserved`),
they go to mysqlclient's ``query()``, after the checks Django's ``cursor()`` makes (health
check, connection, thread, broken transaction) and with its error translation
(``wrap_database_errors``, and the MySQL backend's cursor wrapper's for integrity errors).
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError
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


def execute(connection: BaseDatabaseWrapper, sql: str, *, connected: bool = False) -> Any:
    """Send ``sql`` (complete text, no parameters, no result set) on MySQL/MariaDB; returns
    mysqlclient's connection, which tells ``affected_rows()`` and ``insert_id()``. Only where
    :func:`unobserved` says so. ``connected``: the caller has just made the health check and
    ``ensure_connection()`` itself (``literal()`` needs the driver's connection too)."""
    if not connected:
        connection.close_if_health_check_failed()
        connection.ensure_connection()
    connection.validate_thread_sharing()
    connection.validate_no_broken_transaction()
    driver = connection.connection
    with connection.wrap_database_errors:
        try:
            driver.query(sql.encode(driver.encoding))
        except connection.Database.OperationalError as error:
            from django.db.backends.mysql.base import CursorWrapper  # needs mysqlclient

            if error.args[0] in CursorWrapper.codes_for_integrityerror:  # as Django's cursor
                raise IntegrityError(*error.args) from error
            raise
    return driver
