"""PostgreSQL 13+ (psycopg 3.2 or later: its `notifies(timeout=…)`): LISTEN/NOTIFY wakes idle workers."""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from django.db import connections, transaction
from django.db.models import BooleanField, F, Func, Value
from django.db.models.expressions import RawSQL

from ..conf import settings
from .base import HeadsLockSql, QueueBackend, SqlParams, WalkStep, compiled, run_quietly
from .error_groups import masked_last_line
from .postgresql_partitions import PostgreSQLPartitioning
from .prepared import StatementLost, fetch_prepared
from .sqlstate import sqlstate

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.models import Model

logger = logging.getLogger("django_dbqueue.backends")

CHANNEL = "django_dbqueue"
#: serialization_failure, deadlock_detected, lock_not_available.
LOCK_CONFLICTS = frozenset({"40001", "40P01", "55P03"})
#: read_only_sql_transaction (a hot standby, default_transaction_read_only).
READ_ONLY = frozenset({"25006"})


class EqualsAny(Func):
    """``column = ANY(array)``, a condition for ``filter()`` (Django has no lookup for it
    outside ``django.contrib.postgres``, which a project need not install)."""

    output_field = BooleanField()

    def as_sql(
        self, compiler: Any, connection: Any, *args: Any, **extra_context: Any
    ) -> tuple[str, tuple[Any, ...]]:
        column, array = self.get_source_expressions()
        column_sql, column_params = compiler.compile(column)
        array_sql, array_params = compiler.compile(array)
        return f"{column_sql} = ANY({array_sql})", (*column_params, *array_params)


class PostgreSQLBackend(QueueBackend):
    vendor = "postgresql"
    can_notify = True
    locking_ctes = True
    locking_union = True
    binds_arrays = True
    full_keys_in_claim = True

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
        """PostgreSQL 15 has no loose index scan (a GROUP BY would read every READY row): a
        recursive walk per part takes one key at a time, each step one index dive on the fair
        index ``(queue_state, key, -queue_priority, queue_run_at, pk)`` past the key before, to
        the first due row after it, which is the next key's head (a LATERAL subquery returns
        both columns); it stops after ``limit`` keys. Keys with no due row are stepped over.
        No budget: the walk never reads a key's other rows. The parts' walks are CTEs of one
        statement, ``extra`` a SELECT after them; ``turn`` (:meth:`fair_turn_ctes`) CTEs before
        them, its row returned as part -2: ``(-2, the turn's key, 1 if fresh else 0)``.

        ``lock`` (with ``turn``; see :meth:`_heads_lock`): the same statement also locks the
        heads of the first keys with nothing running and moves the turn past the last of
        them; every row then has a sixth column, the database's now of the locked rows.

        ``steps`` (:class:`~.base.WalkStep`, one per part; None: each part steps through its
        own rows): a step dives past the key before through the claim's rows alone, the
        part's upper bound checked on the key the walk stands on."""
        ctes: list[str] = []
        selects: list[str] = []
        params: list[Any] = []
        if turn is not None:
            ctes.append(turn[0])
            params.extend(turn[1])
        # Typed NULLs: an ``extra`` SELECT after the walks may count rows there (bigint), the
        # heads' lock returns its rows' database now in a sixth column.
        columns = "dbqueue_key, CAST(NULL AS bigint), dbqueue_pk, dbqueue_priority"
        if lock is not None:
            columns += ", CAST(NULL AS timestamptz)"
        for number, part in enumerate(parts):
            step = steps[number] if steps is not None else WalkStep(part)
            walk_ctes, cte_params = self._walk_cte(f"dbqueue_walk{number}", part, step, key, limit)
            ctes.extend(walk_ctes)
            params.extend(cte_params)
            selects.append(f"SELECT {number}, {columns} FROM dbqueue_walk{number}")
        if lock is not None:
            lock_ctes, lock_selects, lock_params = self._heads_lock(lock, len(parts))
            ctes.extend(lock_ctes)
            selects.extend(lock_selects)
            params.extend(lock_params)
        elif extra is not None:
            selects.append(extra[0])
            params.extend(extra[1])
        if turn is not None:
            # Last: the walk's columns set the UNION's types (first, the turn's text would
            # wrap every branch in a conversion).
            more = ", NULL" if lock is not None else ""
            selects.append(
                "SELECT -2, dbqueue_bound, CASE WHEN dbqueue_fresh THEN 1 ELSE 0 END, NULL, NULL"
                f"{more} FROM dbqueue_turn"
            )
        sql = f"WITH RECURSIVE {', '.join(ctes)} {' UNION ALL '.join(selects)} ORDER BY 1, 2"
        return sql, tuple(params)

    def _heads_lock(self, lock: HeadsLockSql, parts: int) -> tuple[list[str], list[str], list[Any]]:
        """The CTEs and SELECTs by which a walk locks the heads it found (``fair_walk_sql``).

        ``dbqueue_held``: the keys' RUNNING rows, returned as part -1 (``extra``'s rows).
        ``dbqueue_heads``: the first ``limit`` walked keys (by part, then key: the round
        robin's order) with nothing running, their heads. With no weights those are the fair
        order's first rows (each ranks 1, every other row later; ``fairness/bounded.py``), so
        the rows the claim would lock next are locked here (``SKIP LOCKED``, by primary key,
        the claim's filters re-checked): part -3, ``(-3, NULL, token, pk, NULL, now)``.
        ``dbqueue_last``: the key of the last head locked in the claim's order (the latest in
        the round robin: heads all rank alike), part -4 ``(-4, key, …)`` when ``dbqueue_move``
        moved the turn past it; the move happens only when the walk locked the turn fresh (a
        condition on no row: no wait on a turn another claim holds)."""
        walked = " UNION ALL ".join(
            f"SELECT {number} AS dbqueue_part, dbqueue_key, dbqueue_pk FROM dbqueue_walk{number}"
            for number in range(parts)
        )
        ctes = [
            f"dbqueue_held(dbqueue_key, dbqueue_n) AS ({lock.held[0]})",
            f"dbqueue_heads AS (SELECT dbqueue_h.* FROM ({walked}) dbqueue_h WHERE dbqueue_h.dbqueue_pk "
            "IS NOT NULL AND NOT EXISTS (SELECT 1 FROM dbqueue_held WHERE dbqueue_held.dbqueue_key = "
            "dbqueue_h.dbqueue_key) ORDER BY 1, 2 LIMIT %s)",
            f"dbqueue_locked(dbqueue_pk, dbqueue_token, dbqueue_now) AS ({lock.rows[0]})",
            "dbqueue_last AS (SELECT dbqueue_key FROM dbqueue_heads WHERE dbqueue_pk IN (SELECT "
            "dbqueue_pk FROM dbqueue_locked) ORDER BY dbqueue_part DESC, dbqueue_key DESC LIMIT 1)",
            f"dbqueue_move AS ({lock.move[0]} AND (SELECT "
            "dbqueue_fresh FROM dbqueue_turn) AND EXISTS (SELECT 1 FROM dbqueue_last) RETURNING 1)",
        ]
        selects = [
            "SELECT -1, dbqueue_key, dbqueue_n, NULL, NULL, NULL FROM dbqueue_held",
            "SELECT -3, NULL, dbqueue_token, dbqueue_pk, NULL, dbqueue_now FROM dbqueue_locked",
            "SELECT -4, dbqueue_key, NULL, NULL, NULL, NULL FROM dbqueue_last "
            "WHERE EXISTS (SELECT 1 FROM dbqueue_move)",
        ]
        return ctes, selects, [*lock.held[1], lock.limit, *lock.rows[1], *lock.move[1]]

    def _walk_cte(
        self, name: str, rows: Any, step: WalkStep, key: str, limit: Any
    ) -> tuple[list[str], list[Any]]:
        """The CTE ``name``: up to ``limit`` keys of ``rows`` in key order, each with its head
        (``dbqueue_key, dbqueue_pk, dbqueue_priority, dbqueue_n``). The first is the first due
        row of ``rows``; each next one the first due row of ``step.rows`` past the key before
        (one index dive). With ``step.upper``, the walk stops on the first key not below it,
        and a second CTE (``name`` then, the walk ``{name}_all``) leaves out the one key it
        may have found past it."""
        order = (key, "-queue_priority", "queue_run_at", "pk")
        walk = f"{name}_all" if step.upper is not None else name
        first = rows.ready().order_by(*order).filter(**{f"{key}__isnull": False}).annotate(dbqueue_n=Value(1))
        first_sql, first_params = compiled(first.values_list(key, "pk", "queue_priority", "dbqueue_n")[:1])
        after = step.rows.ready().order_by(*order).filter(**{f"{key}__gt": RawSQL(f"{walk}.dbqueue_key", ())})
        next_sql, next_params = compiled(after.values_list(key, "pk", "queue_priority")[:1])
        go_on, go_on_params = f"{walk}.dbqueue_n < %s", [limit]
        if step.upper is not None:
            go_on += f" AND {walk}.dbqueue_key < ({step.upper[0]})"
            go_on_params.extend(step.upper[1])
        ctes = [
            f"{walk}(dbqueue_key, dbqueue_pk, dbqueue_priority, dbqueue_n) AS ("
            f"({first_sql}) UNION ALL SELECT dbqueue_next.*, {walk}.dbqueue_n + 1 FROM {walk} "
            f"CROSS JOIN LATERAL ({next_sql}) dbqueue_next WHERE {go_on})"
        ]
        params = [*first_params, *next_params, *go_on_params]
        if step.upper is not None:
            ctes.append(f"{name} AS (SELECT * FROM {walk} WHERE dbqueue_key <= ({step.upper[0]}))")
            params.extend(step.upper[1])
        return ctes, params

    def locking_statement(
        self, selects: Sequence[SqlParams], limit: int | None, writes: Sequence[SqlParams] = ()
    ) -> SqlParams:
        """The ``selects`` as CTEs read one after the other (``UNION ALL``), the ``writes`` as
        data-modifying CTEs. A CTE that locks is never inlined, and PostgreSQL evaluates it
        only as far as its reader asks: under the outer ``LIMIT``, a later SELECT locks only
        the rows still wanted. A data-modifying CTE runs in full whatever is read."""
        ctes: list[str] = []
        params: list[Any] = []
        for number, (sql, write_params) in enumerate(writes):
            ctes.append(f"dbqueue_w{number} AS ({sql})")
            params.extend(write_params)
        for number, (sql, select_params) in enumerate(selects):
            ctes.append(f"dbqueue_s{number} AS ({sql})")
            params.extend(select_params)
        body = " UNION ALL ".join(f"SELECT * FROM dbqueue_s{number}" for number in range(len(selects)))
        if limit is not None:
            body, params = f"{body} LIMIT %s", [*params, limit]
        return f"WITH {', '.join(ctes)} {body}", tuple(params)

    def fair_turn_ctes(
        self, table: str, model: str, last_key: str, label: str, key_type: str | None
    ) -> SqlParams | None:
        """The turn's row as the statement's snapshot saw it (``dbqueue_seen``) and locked
        (``dbqueue_turn``). ``SKIP LOCKED``: a turn another claim holds gives no row (no wait,
        no error, which would end the claim's transaction); the claim then takes the turn by
        its own statement. A lock returns the row's newest version: when another claim moved
        the turn after this statement's snapshot, its ``xmin`` differs from the one seen, the
        walk (``dbqueue_bound`` NULL) reads nothing, and the claim walks again. The stored
        text becomes the key's type only where that cannot fail (a bad cast would end the
        claim's transaction; ``rotation`` reads a turn that does not parse as no turn)."""
        if key_type == "text":
            bound = f"NULLIF({last_key}, '')"
        elif key_type == "integer":
            bound = f"CASE WHEN {last_key} ~ '^-?[0-9]{{1,18}}$' THEN CAST({last_key} AS bigint) END"
        else:
            return None
        seen = f"dbqueue_seen AS (SELECT xmin AS dbqueue_x FROM {table} WHERE {model} = %s)"
        fresh = "xmin = (SELECT dbqueue_x FROM dbqueue_seen)"
        locked = (
            f"dbqueue_turn AS (SELECT {bound} AS dbqueue_bound, {fresh} AS dbqueue_fresh "
            f"FROM {table} WHERE {model} = %s FOR UPDATE SKIP LOCKED)"
        )
        return f"{seen}, {locked}", (label, label)

    def with_pks(self, rows: Any, pks: list[Any]) -> Any:
        """The keys as one array parameter (:meth:`with_array`): psycopg converts a statement
        of more than 50 parameters anew on every run (its cache holds only smaller ones),
        about 0.5 ms of a fair claim's CPU for a batch of 100."""
        prep = rows.model._meta.pk.get_db_prep_value
        return self.with_array(rows, "pk", [prep(pk, self.connection) for pk in pks])

    def with_array(self, rows: Any, name: str, array: Any) -> Any:
        """``name = ANY(%s)``. Not ``name IN (SELECT unnest(%s))``: the planner guesses a
        set-returning function's rows and, on a table of some thousands of rows, hashed them
        against a sequential scan of the whole table (2.2 ms of a fair claim's lock at 12,500
        rows, growing with the table, against 0.2 ms); ``= ANY`` of a bound array is an index
        scan."""
        # An expression (a subquery's ARRAY) as it is, a list as a parameter.
        value = array if hasattr(array, "resolve_expression") else Value(array)
        return rows.filter(EqualsAny(F(name), value))

    def error_group(self, column: str) -> Any:
        return masked_last_line(column, word_boundary=r"\y", every=(Value("g"),))

    def is_lock_conflict(self, exc: BaseException) -> bool:
        return sqlstate(exc) in LOCK_CONFLICTS

    def fetch_repeated(self, statement: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        if not settings.PREPARED_STATEMENTS:
            return super().fetch_repeated(statement, params)
        return fetch_prepared(self.connection, statement, params)

    def must_run_again(self, exc: BaseException) -> bool:
        return self.is_lock_conflict(exc) or isinstance(exc, StatementLost)

    def is_read_only(self, exc: BaseException) -> bool:
        return sqlstate(exc) in READ_ONLY

    def bound_idle_transactions(self, connection: BaseDatabaseWrapper, seconds: float) -> bool:
        # In milliseconds; set_config() takes it as a parameter (SET cannot).
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT set_config('idle_in_transaction_session_timeout', %s, false)",
                [str(max(1, math.ceil(seconds * 1000)))],
            )
        return True

    def count_running_by_index(self) -> None:
        # A row that leaves RUNNING keeps its index entries under 'running' until (auto)vacuum
        # removes them. A bitmap scan, the plan PostgreSQL picks for "the RUNNING rows", reads
        # every such entry's heap page on every claim and never records that it found a dead
        # row; an index scan marks the entry dead the first time (kill_prior_tuple), and later
        # counts skip it without a heap read. Measured (bench/flow_claim.py's table after three
        # rounds of 4 x 20,000 rows, no vacuum): the count read 240,100 entries and 8,398 heap
        # pages each claim (12-15 ms); by index 56 ms once, then 0.66 ms. SET LOCAL ends with
        # the transaction, which the caller owns (never a user's).
        with self.connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_bitmapscan = off")

    def server_in_transaction(self) -> bool:
        raw = self.connection.connection
        if raw is None:
            return False
        info = getattr(raw, "info", None)  # psycopg 3: the client tracks it, no round trip
        status = info.transaction_status if info is not None else raw.get_transaction_status()
        return int(status) != 0  # IDLE

    def session_room(self) -> tuple[int, int] | None:
        def room() -> tuple[int, int]:
            with self.connection.cursor() as cursor:
                cursor.execute(
                    "SELECT current_setting('max_connections')::int, (SELECT count(*) FROM pg_stat_activity)"
                )
                limit, used = cursor.fetchone()
            return int(used), int(limit)

        return run_quietly("session count", room)

    def notify(self, tables: Iterable[str]) -> None:
        connection = self.connection
        wanted = set(tables)
        if not connection.in_atomic_block:
            for table in sorted(wanted):
                self._send(table)
            return
        # One NOTIFY per table per transaction: Django drops its on_commit list on a
        # rollback, so a table found there is pending exactly while this one may commit.
        queued = {getattr(entry[1], "dbqueue_table", None) for entry in connection.run_on_commit}
        for table in sorted(wanted - queued):
            send = partial(self._send, table)
            # A partial takes attributes (typeshed's partial does not say so): the pending table.
            send.dbqueue_table = table  # type: ignore[attr-defined]
            transaction.on_commit(send, using=self.alias)

    def _send(self, table: str) -> None:
        def send() -> None:
            with self.connection.cursor() as cursor:
                cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, table])

        run_quietly("NOTIFY", send)

    def listen(self, tables: Iterable[str], wake: threading.Event, stop: threading.Event) -> None:
        wanted = set(tables)

        def on_note(note: str) -> None:
            if note in wanted:
                wake.set()

        self.listen_notes(on_note, stop)

    def listen_notes(self, on_note: Callable[[str], None], stop: threading.Event) -> None:
        # A connection of its own, outside Django's per-thread handler, idle in autocommit.
        wrapper = connections.create_connection(self.alias)
        try:
            wrapper.ensure_connection()
            with wrapper.cursor() as cursor:
                cursor.execute(f"LISTEN {CHANNEL}")
            raw = wrapper.connection
            while not stop.is_set():
                for note in raw.notifies(timeout=0.5):
                    on_note(note.payload)
                    if stop.is_set():
                        break
        finally:
            wrapper.close()

    def table_row_estimate(self, table: str) -> int | None:
        def estimate() -> int | None:
            with self.connection.cursor() as cursor:
                # -1 when the table was never analysed (PostgreSQL 14+): no estimate then.
                cursor.execute(
                    "SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass(%s)",
                    [self.connection.ops.quote_name(table)],
                )
                row = cursor.fetchone()
            return None if row is None or row[0] is None or row[0] < 0 else int(row[0])

        return run_quietly("row estimate", estimate)

    def plan_row_estimate(self, qs: Any) -> int | None:
        def estimate() -> int | None:
            plan = json.loads(qs.explain(format="json"))
            return int(plan[0]["Plan"]["Plan Rows"])

        try:
            return run_quietly("plan estimate", estimate)
        except (ValueError, KeyError, IndexError, TypeError):
            return None

    def history_partitioning(self, model: type[Model]) -> PostgreSQLPartitioning:
        return PostgreSQLPartitioning(self.alias, model)
