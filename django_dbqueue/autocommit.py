"""Back-to-back transactions on MySQL/MariaDB without the ``SET autocommit`` round trips.

Django enters a transaction by turning autocommit off and leaves it by turning autocommit
back on. With mysqlclient each switch is a statement sent to the server: two round trips per
transaction, as many as the work itself for an atomic-mode job (one outcome UPDATE, one
history INSERT). While :func:`deferred_autocommit` is active, the switch back after a
commit or rollback is deferred: if the next thing the connection does is start another
transaction, the session is already in the right mode and nothing is sent. Any statement
run outside a transaction first restores autocommit, so it commits on its own as Django
promises, and leaving the block restores it too.

Only statements sent through Django's cursors are seen: a handler that talks to the raw DB-API
connection (``connection.connection``) should do so inside ``transaction.atomic()``, which
commits what it sends.

Django's own bookkeeping is untouched (``get_autocommit()``, ``on_commit()`` hooks, which
still run right after each commit), and PostgreSQL and SQLite need none of this: their
drivers switch modes without a round trip, so the block does nothing there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.db import DatabaseError, connections

from . import direct


@contextmanager
def deferred_autocommit(using: str) -> Iterator[None]:
    connection = connections[using]
    if connection.vendor != "mysql" or connection.in_atomic_block:
        yield
        return
    switch = connection._set_autocommit  # the backend's: one SET autocommit statement

    def session_autocommit() -> bool | None:
        session = connection.connection
        # mysqlclient reads this from the status flags of the server's last reply.
        return None if session is None else bool(session.get_autocommit())

    def set_autocommit(autocommit: bool) -> None:
        if autocommit:
            return  # deferred: see before_statement() and the end of the block
        if session_autocommit() is not False:
            switch(False)

    def before_statement(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        if connection.autocommit and not connection.in_atomic_block and session_autocommit() is False:
            switch(True)
        return execute(sql, params, many, context)

    setattr(before_statement, direct.BOOKKEEPING, True)  # see pipeline.CommitCarrier
    connection._set_autocommit = set_autocommit
    connection.execute_wrappers.append(before_statement)
    # pipeline.CommitCarrier relies on it: a transaction it leaves open survives until the next.
    connection._dbq_autocommit_deferred = True
    try:
        yield
    finally:
        del connection._dbq_autocommit_deferred
        connection.execute_wrappers.remove(before_statement)
        del connection._set_autocommit  # the class's method again
        if connection.autocommit and not connection.in_atomic_block and session_autocommit() is False:
            try:
                switch(True)
            except DatabaseError:
                # The server is gone: a new session starts in the mode Django asks for.
                connection.close()
