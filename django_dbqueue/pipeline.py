"""Atomic-mode jobs in one round trip each on MariaDB: a commit that carries statements.

An atomic job is one transaction (DESIGN.md): lock the row with a fenced statement, run the
handler, write the outcome and its attempt history, commit. Sent one at a time that is four
statements and four replies. On MariaDB a worker sends the end of one job and the start of
the next as one anonymous block instead, when Django commits the job's ``atomic()``::

    BEGIN NOT ATOMIC
      UPDATE <queue table> SET queue_state = 'succeeded', … WHERE pk IN (<job>) AND queue_token = <claim>;
      IF ROW_COUNT() > 0 THEN INSERT INTO <attempt history> … VALUES (<the claimed row's values>); END IF;
      COMMIT;
      BEGIN
        DECLARE CONTINUE HANDLER FOR SQLEXCEPTION BEGIN END;
        UPDATE <queue table> SET queue_token = queue_token WHERE pk IN (<next job>) AND queue_token = <claim>;
      END;
    END

The last ``UPDATE`` changes nothing: it is the next job's fenced row lock, the first statement
of the next job's transaction, sent early. The attempt row is written only if the fenced
``UPDATE`` wrote the job's row, and by ``INSERT … VALUES`` rather than the ``INSERT … SELECT`` a
batch's successes use: that holds the history table's AUTO-INC lock to the end of the
statement, and workers committing one job at a time queue on it (raw SQL here, 4 processes:
2,384 blocks/s with ``INSERT … SELECT``, 2,960/s with ``VALUES``; 1 process: 1,347/s and
1,470/s).

Measured with mysqlclient on MariaDB 10.11 here, every reply the server sends costs about as
much as a statement (~100 µs): four separate statements ran ~1,000 jobs/s, the block
~1,670/s, against ~2,450/s for one autocommit ``UPDATE`` per job.

The server reports the rows matched by all statements of a block as one count (the session uses
``CLIENT_FOUND_ROWS``, as Django sets it, so the lock counts although it changes nothing);
:class:`CarriedCommit` decodes it. A lock that fails (a lock-wait timeout, a deadlock) is
swallowed by the handler and counts 0: the next job then locks its row itself, as it would have.

:class:`CommitCarrier` is the hook: while it is active on a connection, the commit of the
outermost ``atomic()`` block sends the carried block (which ends the transaction itself) instead
of a bare ``COMMIT``; without one, a commit is a commit. It needs :func:`deferred_autocommit`
underneath: Django switches autocommit on after every transaction, which on MySQL commits, and
would end the next job's transaction, lock and all, before it started. Anything else that reaches
the server in between (a statement through Django's cursor, a commit or rollback, a reconnect)
makes :meth:`CommitCarrier.holds` answer False, and the job locks its row as usual.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.db import connections

from . import direct

#: What a block's row count means: (outcome written, or None if it cannot tell; next row locked).
Decoder = Callable[[int], tuple[bool | None, bool]]


@dataclass
class CarriedCommit:
    """A block to send in place of ``COMMIT``, and what came of it."""

    sql: str
    params: list[Any] | None  # None: the SQL is complete text
    decode: Decoder
    #: The finishing time the block writes, and the next row it locks (None: it locks none).
    finished_at: Any = None
    lock_next: Any = None
    #: Set once the block ran: whether the outcome was written (None: the count cannot tell)
    #: and whether the next row is locked.
    sent: bool = False
    written: bool | None = None
    next_locked: bool = False


class CommitCarrier:
    """Lets the next commit of one connection carry a block of statements (MariaDB only)."""

    def __init__(self, using: str) -> None:
        self.connection = connections[using]
        self._pending: CarriedCommit | None = None
        # What the last block locked for the next job, and the state of the session then.
        self._locked: tuple[Any, int, Any] | None = None
        self._generation = 0

    @staticmethod
    def supported(using: str) -> bool:
        connection = connections[using]
        return (
            connection.vendor == "mysql"
            and connection.mysql_is_mariadb
            # mysqlclient allows several statements per call unless told otherwise.
            and connection.settings_dict.get("OPTIONS", {}).get("multi_statements", True)
        )

    def carry(self, commit: CarriedCommit) -> None:
        """Send ``commit.sql`` instead of ``COMMIT`` at the end of the current transaction."""
        self._pending = commit

    def clear(self) -> None:
        self._pending = None

    def holds(self, pk: Any) -> bool:
        """Whether the transaction open now began with the fenced lock of row ``pk`` (sent by
        the previous block) and nothing else reached the server since."""
        locked, self._locked = self._locked, None
        if locked is None:
            return False
        locked_pk, generation, session = locked
        return (
            locked_pk == pk
            and generation == self._generation
            and self.connection.connection is session
            and session is not None
            and session.get_autocommit() is False
        )

    # -- the hook ----------------------------------------------------------------------------

    @contextmanager
    def active(self) -> Iterator[CommitCarrier]:
        connection = self.connection
        if not getattr(connection, "_dbq_autocommit_deferred", False):
            raise RuntimeError("CommitCarrier needs deferred_autocommit() active on the connection")
        plain_commit = connection._commit
        plain_rollback = connection._rollback

        def commit() -> None:
            self._generation += 1
            pending, self._pending = self._pending, None
            if pending is None or connection.connection is None:
                plain_commit()
                return
            if pending.params is None and direct.unobserved(connection, bookkeeping_too=True):
                # At a commit the bookkeeping wrappers have nothing to do (deferred_autocommit's
                # acts outside transactions only; this one's count the commit counts itself),
                # so the block may go past Django's cursor (django_dbqueue.direct).
                rowcount = direct.execute(connection, pending.sql).affected_rows()
            else:
                # Django's cursor: the block is logged and its errors wrapped like any statement's.
                with connection.cursor() as cursor:
                    cursor.execute(pending.sql, pending.params)
                    rowcount = cursor.rowcount
            pending.sent = True
            pending.written, pending.next_locked = pending.decode(rowcount)
            if pending.next_locked:
                self._locked = (pending.lock_next, self._generation, connection.connection)

        def rollback() -> None:
            self._generation += 1
            self._pending = None
            plain_rollback()

        def before_statement(
            execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
        ) -> Any:
            self._generation += 1
            return execute(sql, params, many, context)

        setattr(before_statement, direct.BOOKKEEPING, True)

        connection._commit = commit
        connection._rollback = rollback
        connection.execute_wrappers.append(before_statement)
        try:
            yield self
        finally:
            connection.execute_wrappers.remove(before_statement)
            del connection._commit  # the class's methods again
            del connection._rollback
            self._pending = self._locked = None
