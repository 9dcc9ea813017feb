"""Handlers that leave their connection in a transaction: an ``atomic()`` entered and never
left, ``set_autocommit(False)`` left off, a raw ``BEGIN``.

Left alone, every outcome the worker writes afterwards would sit in that transaction and never
commit: rows would stay RUNNING while the worker reports them done. So the worker looks after
each handler (Django's own state, no round trip) and before each flush of outcomes (the
server's, one statement per flush), fails the job that did it, and puts its connection right:
a rollback where Django allows one, else a closed connection and a replaced worker process.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper


class LeakedTransaction(Exception):
    """The handler left its database connection in a transaction."""


def left_open(using: str | BaseDatabaseWrapper) -> LeakedTransaction | None:
    """What the last handler left open on ``using``'s connection (or on the connection given:
    a caller that asks after every job looks it up once), by Django's own state."""
    connection = connections[using] if isinstance(using, str) else using
    if connection.in_atomic_block:
        return LeakedTransaction("the handler entered transaction.atomic() and did not leave it")
    if not connection.get_autocommit():
        return LeakedTransaction("the handler turned autocommit off (set_autocommit(False)) and left it off")
    return None


def restore(using: str) -> bool:
    """Roll the leaked transaction back; True if the connection is fit for use again. An
    ``atomic()`` block that was never left cannot be unwound from outside: the connection is
    closed (the server rolls back and frees its locks) and the worker must be replaced."""
    connection = connections[using]
    if connection.in_atomic_block:
        connection.close()
        return False
    connection.rollback()
    connection.set_autocommit(True)
    return True


def on_a_fresh_connection(write: Callable[[], None]) -> None:
    """Run ``write`` on a connection of its own (a short-lived thread's), for when this
    thread's connection is beyond use."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            write()
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller's thread
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, name="dbqueue-leak-outcome")
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
