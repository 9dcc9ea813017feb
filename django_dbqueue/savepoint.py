"""A savepoint that costs nothing until the code inside it touches the database.

Grouped atomic mode runs many handlers in one transaction, each behind a savepoint so that a
failing handler rolls back alone. Created eagerly, that is two statements per job (``SAVEPOINT``
and ``RELEASE``) whether or not the handler writes anything. :class:`LazySavepoint` sends the
``SAVEPOINT`` only right before the first statement the handler sends through Django's
connection (an execute wrapper watches for it), and never releases it: the commit ends every
savepoint anyway. A handler that writes pays one statement, one that does not pays none.

Rolling back also drops the ``on_commit()`` hooks the handler registered: Django discards
hooks by savepoint only for savepoints opened by ``atomic()``.

Statements a handler sends on the raw DB-API connection (``connection.connection``) bypass
Django's cursor and are not seen: they would not be covered by the savepoint.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

from django.db import connections


class LazySavepoint:
    """``with LazySavepoint(using) as savepoint: handler()``; then ``savepoint.rollback()`` to
    undo what the handler did (inside the enclosing transaction)."""

    def __init__(self, using: str) -> None:
        self.connection = connections[using]
        self.sid: str | None = None
        self._hooks = 0

    def __enter__(self) -> LazySavepoint:
        self._hooks = len(self.connection.run_on_commit)
        self.connection.execute_wrappers.append(self._before_statement)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop_watching()

    def _before_statement(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        self._stop_watching()  # first, so that the SAVEPOINT statement itself is not caught
        if self.sid is None:
            self.sid = self.connection.savepoint()
        return execute(sql, params, many, context)

    def _stop_watching(self) -> None:
        wrappers = self.connection.execute_wrappers
        if self._before_statement in wrappers:
            wrappers.remove(self._before_statement)

    def rollback(self) -> None:
        """Undo the block's statements (if it sent any) and its ``on_commit()`` hooks."""
        if self.sid is not None:
            self.connection.savepoint_rollback(self.sid)
        del self.connection.run_on_commit[self._hooks :]
