"""PostgreSQL: the claim's statements that run again and again with the same text, prepared.

Django binds parameters on the client (psycopg's ``ClientCursor``), so PostgreSQL parses,
analyses and plans every statement it is sent. For most statements that is a small share of
their time; for the fair claim's walk (docs/fair-share.md) it is a third: about 0.65 ms of
the statement's 2 ms at 100 keys, for a text that is the same at every claim of a model (the
turn, the keys and the database's clock are read inside the statement). psycopg's own
prepared statements (``server_side_binding``) do not help it: they send the values as
parameters, and PostgreSQL plans the walk anew for each run's values (docs/reference/
databases.md).

So a statement this module is given is sent as it is the first time a connection sees its
text and prepared (``PREPARE … AS`` the text with its values in it) the second time: from
then on it runs as ``EXECUTE name``, its plan made once. With every value in the text the
plan is the one PostgreSQL makes for the text itself, not a generic one. The name is a hash
of the text, so one name always means one text, in every session.

``PREPARE`` lives in the server's session, not in a transaction: a pooler that hands each
transaction another session (PgBouncer in transaction mode) loses it. A statement the
session does not have (or has already, or whose plan no longer returns the same columns,
after a migration) is an error inside the claim's transaction; this module forgets what it
had prepared on that connection and raises :class:`StatementLost`, which the claim retries
(``retry_on_lock_conflicts``). After :data:`LOSSES_BEFORE_OFF` losses on one connection it
prepares nothing more there and says so in the log. ``DBQUEUE_PREPARED_STATEMENTS = False``
turns it off; so does psycopg's server-side binding (its cursors cannot put the values in
the text, and it prepares by itself).
"""

from __future__ import annotations

import hashlib
import logging
import weakref
from collections import OrderedDict
from typing import Any

from django.db import DatabaseError, OperationalError

from .sqlstate import sqlstate

logger = logging.getLogger("django_dbqueue.backends")

#: A text is prepared the second time a connection runs it: a statement run once (a claim
#: whose text holds its rows' keys) costs one round trip, not two.
RUNS_BEFORE_PREPARED = 2
#: Texts a connection remembers having run (to count them), and statements it keeps
#: prepared; the least recently run go first (a worker runs one or two texts per model).
TEXTS_REMEMBERED = 64
STATEMENTS_KEPT = 16
#: Statements lost on one connection after which it prepares no more (a pooler's sessions).
LOSSES_BEFORE_OFF = 3
#: invalid_sql_statement_name (not prepared in this session), duplicate_prepared_statement
#: (prepared in this session by a run this module forgot), feature_not_supported ("cached
#: plan must not change result type": a column's type changed under the statement).
LOST = frozenset({"26000", "42P05", "0A000"})


class StatementLost(OperationalError):
    """A prepared statement of the claim was not where it was expected: run the claim again."""


#: What a text is known by: the statement and its values with their types (hashable ones
#: only): ``1`` and ``True`` are equal in Python but not in the text the driver makes of them.
Key = tuple[Any, ...]


class _Session:
    """What one database connection has prepared, and the texts it has run."""

    def __init__(self) -> None:
        self.seen: OrderedDict[Key, int] = OrderedDict()
        self.prepared: OrderedDict[Key, str] = OrderedDict()  # text -> name
        self.losses = 0
        self.generation = 0

    def name_for(self, key: Key) -> str | None:
        """The name the text ``key`` runs under; "": prepare it now; None: run the text."""
        name = self.prepared.get(key)
        if name is not None:
            self.prepared.move_to_end(key)
            return name
        runs = self.seen.pop(key, 0) + 1
        self.seen[key] = runs
        if len(self.seen) > TEXTS_REMEMBERED:
            self.seen.popitem(last=False)
        return None if runs < RUNS_BEFORE_PREPARED else ""

    def forget(self) -> None:
        """After a loss: nothing is known to be prepared. Later names carry a new generation,
        so a statement the session may still hold under an old name is never run again."""
        self.prepared.clear()
        self.seen.clear()
        self.losses += 1
        self.generation += 1


#: By psycopg connection: a new connection (Django reconnects) starts with nothing prepared.
_sessions: weakref.WeakKeyDictionary[Any, _Session] = weakref.WeakKeyDictionary()


def _session(raw_connection: Any) -> _Session:
    session = _sessions.get(raw_connection)
    if session is None:
        session = _sessions[raw_connection] = _Session()
    return session


def _key(sql: str, params: Any) -> Key | None:
    """The text's key, None when a value cannot be one (an array of the claim's keys: such a
    text is run once, and never worth preparing)."""
    key = (sql, *((type(value), value) for value in params))
    try:
        hash(key)
    except TypeError:
        return None
    return key


def fetch_prepared(wrapper: Any, sql: str, params: Any) -> list[tuple[Any, ...]]:
    """The rows of ``sql`` with ``params`` on the Django connection ``wrapper``, run as a
    prepared statement once its text has come before (see the module's docstring). Until then
    it is sent as any statement is, ``sql`` and ``params`` apart."""
    with wrapper.cursor() as cursor:
        session = _session(wrapper.connection)
        # psycopg's server-side binding has no mogrify(): there psycopg prepares by itself.
        can_prepare = hasattr(cursor, "mogrify") and session.losses < LOSSES_BEFORE_OFF
        key = _key(sql, params) if can_prepare else None
        name = None if key is None else session.name_for(key)
        if key is None or name is None:
            cursor.execute(sql, params)
            return [tuple(row) for row in cursor.fetchall()]
        try:
            if not name:
                name = _prepare(cursor, session, key, _text(cursor, sql, params))
            cursor.execute(f"EXECUTE {name}")
        except DatabaseError as exc:
            if sqlstate(exc) not in LOST:
                raise
            _lost(session, exc)
            raise StatementLost(f"a prepared statement of the claim was lost ({exc}); run it again") from exc
        return [tuple(row) for row in cursor.fetchall()]


def _text(cursor: Any, sql: str, params: Any) -> str:
    """``sql`` with ``params`` in it, quoted by the driver as its client-side binding quotes
    them (psycopg2's ``mogrify()`` gives bytes in the connection's encoding)."""
    text = cursor.mogrify(sql, params)
    return text.decode(cursor.connection.encoding) if isinstance(text, bytes) else text


def _prepare(cursor: Any, session: _Session, key: Key, text: str) -> str:
    digest = hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
    name = f"dbqueue_{digest}_{session.generation}"
    if len(session.prepared) >= STATEMENTS_KEPT:
        _, oldest = session.prepared.popitem(last=False)
        cursor.execute(f"DEALLOCATE {oldest}")
    cursor.execute(f"PREPARE {name} AS {text}")
    session.prepared[key] = name
    return name


def _lost(session: _Session, exc: DatabaseError) -> None:
    session.forget()
    if session.losses >= LOSSES_BEFORE_OFF:
        logger.warning(
            "Prepared statements were lost %d times on one connection (%s): this connection "
            "prepares no more. Behind a pooler that gives each transaction another server "
            "session (PgBouncer in transaction mode), set DBQUEUE_PREPARED_STATEMENTS = False.",
            session.losses,
            exc,
        )
    else:
        logger.info("A prepared statement was lost (%s); the claim runs again", exc)
