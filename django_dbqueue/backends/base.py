"""What every database does the same way, and the questions each backend answers for itself.

The rest of the package never looks at ``connection.vendor``: it asks :func:`backend_for`
(in ``backends/__init__.py``) and calls the answer's methods. The claim protocol itself is
portable ORM code (``queue/queryset.py``); a backend only says what differs underneath it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Model

from ..states import QueueState
from .partitioning import HistoryPartitioning

logger = logging.getLogger("django_dbqueue.backends")

#: A statement and its parameters.
SqlParams = tuple[str, tuple[Any, ...]]


def compiled(qs: Any) -> SqlParams:
    """A QuerySet's statement as its own database would run it. ``query.sql_with_params()``
    compiles for the default database: another database's vendor may need other SQL, and a
    locking SELECT checks that the *default* connection is in a transaction (a claim on a
    second database, inside that database's transaction only, failed)."""
    sql, params = qs.query.get_compiler(using=qs.db).as_sql()
    return sql, tuple(params)


@dataclass(frozen=True)
class HeadsLockSql:
    """What a fair walk needs to lock the heads it finds in its own statement
    (:meth:`QueueBackend.fair_walk_sql` where :attr:`QueueBackend.locking_ctes`).

    ``held``: ``SELECT key, count`` of the keys' RUNNING rows. ``rows``: the locking SELECT
    of the due rows whose primary key is in ``ARRAY(SELECT dbqueue_pk FROM dbqueue_heads)``,
    columns ``(pk, token, database now)``. ``move``: the turn's ``UPDATE``, ending in its
    ``WHERE``, to ``dbqueue_last.dbqueue_key`` (a CTE the backend defines: the key of the
    last head locked, in the claim's order). ``limit``: how many heads, at most (a parameter)."""

    held: SqlParams
    rows: SqlParams
    move: SqlParams
    limit: Any


@dataclass(frozen=True)
class WalkStep:
    """How a recursive walk (:meth:`QueueBackend.fair_walk_sql` on PostgreSQL) steps through
    one part after the part's first key. ``rows``: the claim's rows without the part's range
    of keys. Each step's "past the key before" is the only lower bound a step needs, and a
    second range condition on the key cost every dive's scan-key set-up about 2 µs (0.2 ms of
    a walk over 100 keys, 2026-11-29). ``upper``: the part's inclusive upper bound (SQL, or
    None), which the walk checks on the key it stands on, not in the index: it stops at the
    first key not below it and leaves a key found past it out."""

    rows: Any
    upper: SqlParams | None = None


class QueueBackend:
    """The generic answers; a vendor's subclass overrides what it does differently."""

    vendor = "generic"

    #: Rows are locked by ``SELECT … FOR UPDATE SKIP LOCKED``; without it, a claim is a
    #: compare-and-set UPDATE under the database's single-writer lock (SQLite).
    skip_locked = True

    #: The claim orders by primary key last (first in, first out among rows of equal
    #: priority and due time). On InnoDB the key ends every secondary index, so that order
    #: is free; elsewhere it costs a sort of every due row, and the enqueue time
    #: (``queue_enqueued_at``) breaks ties instead.
    order_by_pk = False

    #: The Spark pipeline (``django_dbqueue.spark``) reads and writes it through JDBC.
    spark_jdbc = False

    #: Idle workers can be woken by the database (PostgreSQL's LISTEN/NOTIFY); elsewhere
    #: they poll with an index-only probe.
    can_notify = False

    #: The fair claim reads a bounded number of rows (``fairness/bounded.py``): the keys with
    #: work by :meth:`fair_keys_sql`, then each chosen key's head rows by its index. SQLite,
    #: a single writer that need not be fast, ranks every due row in one window SELECT.
    bounded_fair = True

    #: Locking SELECTs can be the CTEs of one statement, beside data-modifying CTEs
    #: (PostgreSQL): a claim then sends its aged and plain SELECTs, or the fair claim its
    #: turn's lock with the walk and its turn's move with the rows' lock, as one statement
    #: each (:meth:`locking_statement`, :meth:`fair_turn_ctes`). Elsewhere they stay apart.
    locking_ctes = False

    #: Locking SELECTs can be read one after the other in one statement (their rows in
    #: order, under one ``LIMIT``): an aging claim sends its aged rows' SELECT and the plain
    #: claim's as one (:meth:`locking_statement` without writes). PostgreSQL, by CTEs
    #: (:attr:`locking_ctes`). MariaDB accepts parenthesised locking SELECTs under a ``UNION
    #: ALL``, but runs each to its own ``LIMIT`` (the plain part locked up to a batch it did not
    #: return) and its aged part paid the locking read's cost that
    #: :attr:`reads_aged_rows_unlocked` avoids; it served MariaDB until that replaced it.
    locking_union = False

    #: An aging claim finds its aged rows by a read without locks first, then locks the
    #: ones it found by primary key (MySQL, MariaDB: InnoDB). A locking read of the aged
    #: range visits every index entry a claim delete-marked there since the last purge and,
    #: for each, looks the row up in the clustered index to see whether a transaction still
    #: holds it: measured on MariaDB 10.11 after 80 claims of 100 rows over 100,000 due rows,
    #: 6,610 pages and 5-6 ms for an aged range with no row in it; the read without locks
    #: skipped the same entries in 7 pages and 0.5 ms, round trip included. Elsewhere the
    #: aged rows' locking SELECT stays (PostgreSQL: one statement with the plain claim's,
    #: :attr:`locking_union`).
    reads_aged_rows_unlocked = False

    #: A list of values binds as one array parameter (PostgreSQL): :meth:`with_array` narrows
    #: rows to it, one statement's text for any number of values, built once (the fair
    #: claim's lock of the rows it chose, flow control's slot and RUNNING reads). Elsewhere,
    #: one parameter per value (:meth:`with_pks`, ``__in``).
    binds_arrays = False

    #: A named parameter used in many places of a statement is adapted and quoted once
    #: (mysqlclient formats the statement on the client from a dict of quoted values):
    #: ``bulk_enqueue()`` then sends a value every row shares as one named parameter
    #: (queue/inserts.py). psycopg adapts each place on its own and SQLite's wrapper rewrites
    #: the names, so elsewhere the rows keep positional parameters (no gain, some cost).
    shares_named_parameters = False

    #: Flow control's full keys are left out of a claim by subqueries of its locking SELECT
    #: (PostgreSQL: a round trip cost a claim more than the read); elsewhere, read first.
    full_keys_in_claim = False

    def __init__(self, alias: str) -> None:
        self.alias = alias

    @property
    def connection(self) -> BaseDatabaseWrapper:
        return connections[self.alias]

    # -- the fair claim's keys ------------------------------------------------------------------

    def fair_walk_sql(
        self,
        parts: list[Any],
        key: str,
        limit: Any,
        budget: Any,
        heads: Callable[[], SqlParams],
        extra: SqlParams | None = None,
        turn: SqlParams | None = None,
        lock: HeadsLockSql | None = None,
        steps: Sequence[WalkStep] | None = None,
    ) -> tuple[str, tuple[Any, ...]]:
        """The SELECT of the fair claim's walk (``fairness/heads.py``): in one statement, up
        to ``limit`` keys of each of the READY ``parts`` (QuerySets without a state filter,
        each a range of keys: the round robin's segments), in key order, one row each:
        ``(part number, key, index entries read or NULL, head pk, head priority)``, ordered
        by part and key. ``heads()`` gives the select list of the last four columns over the
        derived table ``dbqueue_keys`` (its head columns correlated subqueries: one index dive
        per key, the plain claim order). ``limit`` and ``budget`` go as parameters (the
        statement is built once and run with parameters only). ``extra``, a SELECT of the same
        five columns, is sent in the same statement (``UNION ALL``; one round trip less).
        ``turn``: :meth:`fair_turn_ctes`' (None where that is None). ``lock``: only where
        :attr:`locking_ctes` (PostgreSQL's override). ``steps``, one per part: how a
        recursive walk steps through it (:class:`WalkStep`; a walk that reads key ranges, as
        this one does, has no use for them)."""
        if lock is not None:
            raise NotImplementedError(f"{self.vendor} cannot lock a walk's heads in its statement")
        branches: list[str] = []
        params: list[Any] = []
        for number, part in enumerate(parts):
            keys_sql, keys_params = self.fair_keys_sql(part, key, limit, budget)
            branches.append(f"(SELECT {number} AS dbqueue_part, dbqueue_p.* FROM ({keys_sql}) dbqueue_p)")
            params.extend(keys_params)
        columns, head_params = heads()
        walked = " UNION ALL ".join(branches)
        sql = f"SELECT dbqueue_keys.dbqueue_part, {columns} FROM ({walked}) dbqueue_keys"
        if extra is not None:
            sql, params = f"{sql} UNION ALL {extra[0]}", [*params, *extra[1]]
        return f"{sql} ORDER BY 1, 2", (*head_params, *params)

    def fair_keys_sql(self, rows: Any, key: str, limit: Any, budget: Any) -> tuple[str, tuple[Any, ...]]:
        """A derived table of up to ``limit`` keys of the READY ``rows`` (a QuerySet
        without a state filter) in key order, NULL left out: columns ``dbqueue_key`` and
        ``dbqueue_rows``, the index entries read for the key (NULL when not counted).

        MySQL and MariaDB read it from an index on ``(queue_state, key)``. With a
        ``budget``, the first ``budget`` entries in key order, grouped (many small keys: about
        ``limit`` entries); the caller sees from the counts that the budget ran out before
        ``limit`` keys (a few keys of many rows each) and asks again without one: then
        grouped by both columns, which MariaDB reads as a loose index scan, one dive per key
        however many rows each holds. The range on ``queue_state`` (BETWEEN, not =) keeps
        MariaDB 10.11 on these plans instead of a ``ref`` read of every READY row, and the
        loose scan needs an index without descending parts. The LIMITs are parameters,
        appended to the compiled (ordered, unsliced) SELECTs."""
        column = self.connection.ops.quote_name(rows.model._meta.get_field(key).column)
        keys = rows.filter(
            queue_state__range=(QueueState.READY, QueueState.READY), **{f"{key}__isnull": False}
        ).order_by()
        if budget is None:
            loose = keys.values("queue_state", key).distinct().order_by("queue_state", key)
            sql, params = compiled(loose)
            columns = f"dbqueue_k.{column} AS dbqueue_key, NULL AS dbqueue_rows"
            return f"SELECT {columns} FROM ({sql} LIMIT %s) dbqueue_k", (*params, limit)
        sql, params = compiled(keys.order_by(key).values(key))
        grouped = (
            f"SELECT dbqueue_k.{column} AS dbqueue_key, COUNT(*) AS dbqueue_rows "
            f"FROM ({sql} LIMIT %s) dbqueue_k "
            f"GROUP BY dbqueue_k.{column} ORDER BY dbqueue_k.{column} LIMIT %s"
        )
        return grouped, (*params, budget, limit)

    def locking_statement(
        self, selects: Sequence[SqlParams], limit: int | None, writes: Sequence[SqlParams] = ()
    ) -> SqlParams:
        """One statement of locking ``selects`` read in order (their rows one after the other,
        at most ``limit``) and data-modifying ``writes`` run beside them: only where
        :attr:`locking_ctes` says so."""
        raise NotImplementedError(f"{self.vendor} cannot lock in a statement's CTEs")

    def fair_turn_ctes(
        self, table: str, model: str, last_key: str, label: str, key_type: str | None
    ) -> SqlParams | None:
        """The CTEs that lock a model's fair turn inside the walk's statement
        (``fairness/heads.py``): ``dbqueue_turn(dbqueue_bound, dbqueue_fresh)``, the turn's key
        as the walk's bound (``key_type``: ``"text"`` or ``"integer"``, else None) and
        whether the walk's snapshot saw the turn as locked. None where the turn is taken by
        its own statement (here: everywhere but PostgreSQL)."""
        return None

    def with_pks(self, rows: Any, pks: list[Any]) -> Any:
        """``rows`` (a QuerySet) narrowed to the primary keys ``pks``: the fair claim locks the
        rows it chose so. One parameter per key here (``pk IN (…)``)."""
        return rows.filter(pk__in=pks)

    def with_array(self, rows: Any, name: str, array: Any) -> Any:
        """``rows`` whose field ``name`` (``"pk"`` too) is one of ``array``'s values, one
        parameter (a list of values prepared for the database, or a marker a cached statement
        fills with one): only where :attr:`binds_arrays` says so."""
        raise NotImplementedError(f"{self.vendor} binds no array parameter")

    # -- errors ----------------------------------------------------------------------------

    def is_lock_conflict(self, exc: BaseException) -> bool:
        """A deadlock or lock-wait timeout: the whole transaction may safely be retried."""
        return False

    def must_run_again(self, exc: BaseException) -> bool:
        """The whole transaction failed for a reason running it again removes: a lock
        conflict, or (PostgreSQL) a prepared statement its session lost (backends/prepared.py)."""
        return self.is_lock_conflict(exc)

    def is_read_only(self, exc: BaseException) -> bool:
        """The server refuses writes (a replica, a read-only switch-over): wait and reconnect."""
        return False

    # -- statements run again and again ------------------------------------------------------

    def fetch_repeated(self, statement: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """The rows of a statement the claim runs with the same text at every claim of a
        model (the fair walk, the aging and flow-control reads), through Django's cursor.
        PostgreSQL prepares it (backends/prepared.py); elsewhere it is run as it is."""
        with self.connection.cursor() as cursor:
            cursor.execute(statement, params)
            return [tuple(row) for row in cursor.fetchall()]

    # -- SQL text ------------------------------------------------------------------------------

    def as_text(self, column_sql: str) -> str:
        """``column_sql`` as a character string (a key copied into the history's text column)."""
        return f"CAST({column_sql} AS TEXT)"

    def error_group(self, column: str) -> Any:
        """An expression of ``column``'s error group (``tracebacks.error_group`` in SQL), or
        None where the database has no regular expressions (the caller groups in Python)."""
        return None

    # -- configuration -----------------------------------------------------------------------

    def configuration_warning(self) -> str | None:
        """What in this database's settings makes workers fail where they need not (a system
        check warning, ``django_dbqueue.W002``); None when nothing does."""
        return None

    # -- transactions ----------------------------------------------------------------------

    def server_in_transaction(self) -> bool:
        """Whether the session has a transaction open on the server, whatever Django thinks
        (a raw ``BEGIN`` sent by a handler). Asked once per flush of a batch's outcomes."""
        return False

    def bound_idle_transactions(self, connection: BaseDatabaseWrapper, seconds: float) -> bool:
        """Ask the server to end ``connection``'s session when it sits idle inside a transaction
        longer than ``seconds``, which rolls the transaction back and frees its row locks.
        Return False where the database has no such per-session bound."""
        return False

    def count_running_by_index(self) -> None:
        """Before a claim's counts of RUNNING rows, in the claim's own transaction: make them
        read the state index entry by entry where the database would otherwise read it in a
        way that never learns which entries are dead (PostgreSQL's bitmap scans). Nothing
        elsewhere."""

    # -- wake-ups --------------------------------------------------------------------------

    def notify(self, tables: Iterable[str]) -> None:
        """Tell idle workers that ``tables`` have new work (after the current transaction
        commits). A no-op where the database has no channel for it."""

    def listen(self, tables: Iterable[str], wake: threading.Event, stop: threading.Event) -> None:
        """Block until ``stop`` is set, setting ``wake`` whenever ``tables`` get work."""
        raise NotImplementedError(f"{self.vendor} has no notification channel")

    def listen_notes(self, on_note: Callable[[str], None], stop: threading.Event) -> None:
        """Block until ``stop`` is set, calling ``on_note`` with each notification's text
        (``notify``'s names: a table, or ``reply:<pk>`` for a request's reply)."""
        raise NotImplementedError(f"{self.vendor} has no notification channel")

    # -- sizes -----------------------------------------------------------------------------

    def table_row_estimate(self, table: str) -> int | None:
        """The planner's estimate of a table's row count (cheap), or None if unknown."""
        return None

    def plan_row_estimate(self, qs: Any) -> int | None:
        """The planner's estimate of the rows a single-table QuerySet returns, or None."""
        return None

    def session_room(self) -> tuple[int, int] | None:
        """(sessions open now, the server's limit), or None where there is no such limit."""
        return None

    # -- history partitions ----------------------------------------------------------------

    def history_partitioning(self, model: type[Model]) -> HistoryPartitioning:
        """Time-partition upkeep of the history table ``model`` (partitioning.py)."""
        return HistoryPartitioning(self.alias, model)

    def describe(self) -> str:
        return f"{self.vendor} ({self.alias})"


def run_quietly(what: str, operation: Callable[[], Any]) -> Any:
    """Run an optional database courtesy (a wake-up, an estimate): its failure is logged at
    DEBUG and ignored, since polling or an exact count covers for it."""
    from django.db import DatabaseError

    try:
        return operation()
    except DatabaseError as exc:
        logger.debug("%s failed: %s", what, exc)
        return None
