"""MySQL 8.0.1+ and MariaDB 10.6+ (mysqlclient, or MySQL Connector/Python)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, cast

from .base import QueueBackend, compiled, run_quietly
from .error_groups import masked_last_line
from .mysql_partitions import MySQLPartitioning

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.backends.mysql.base import DatabaseWrapper
    from django.db.models import Model

#: ER_LOCK_WAIT_TIMEOUT, ER_LOCK_DEADLOCK.
LOCK_CONFLICTS = frozenset({1205, 1213})
#: ER_OPTION_PREVENTS_STATEMENT (``--read-only``), ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION.
READ_ONLY = frozenset({1290, 1792})


def _code(exc: BaseException) -> int | None:
    # Django re-raises the driver's error with the driver's args: (code, message). MySQL
    # Connector/Python's errors carry ``errno`` as well.
    code = getattr(exc, "errno", None)
    if isinstance(code, int):
        return code
    if exc.args and isinstance(exc.args[0], int):
        return exc.args[0]
    return None


class MySQLBackend(QueueBackend):
    vendor = "mysql"
    # InnoDB's secondary index entries end with the primary key: the claim index orders by
    # it for free.
    order_by_pk = True
    spark_jdbc = True  # MariaDB Connector/J speaks to MySQL and MariaDB alike
    shares_named_parameters = True  # mysqlclient quotes a dict's values once each
    reads_aged_rows_unlocked = True  # InnoDB's locking reads: see the base class

    def error_group(self, column: str) -> Any:
        return masked_last_line(column)

    def as_text(self, column_sql: str) -> str:
        return f"CAST({column_sql} AS CHAR)"

    def is_lock_conflict(self, exc: BaseException) -> bool:
        return _code(exc) in LOCK_CONFLICTS

    def is_read_only(self, exc: BaseException) -> bool:
        return _code(exc) in READ_ONLY

    def server_in_transaction(self) -> bool:
        connection = cast("DatabaseWrapper", self.connection)
        with connection.cursor() as cursor:
            if connection.mysql_is_mariadb:
                cursor.execute("SELECT @@in_transaction")
            else:  # MySQL 8 has no such variable: InnoDB knows the session's transaction
                cursor.execute(
                    "SELECT COUNT(*) FROM information_schema.innodb_trx "
                    "WHERE trx_mysql_thread_id = CONNECTION_ID()"
                )
            return bool(cursor.fetchone()[0])

    def bound_idle_transactions(self, connection: BaseDatabaseWrapper, seconds: float) -> bool:
        # MariaDB 10.3+ only (whole seconds): MySQL 8 has no idle-transaction timeout, and
        # its wait_timeout would also end sessions that are merely idle between polls.
        if not cast("DatabaseWrapper", connection).mysql_is_mariadb:
            return False
        with connection.cursor() as cursor:
            cursor.execute("SET SESSION idle_transaction_timeout = %s", [max(1, math.ceil(seconds))])
        return True

    def session_room(self) -> tuple[int, int] | None:
        def room() -> tuple[int, int]:
            with self.connection.cursor() as cursor:
                cursor.execute("SELECT @@max_connections")
                limit = int(cursor.fetchone()[0])
                cursor.execute("SHOW STATUS LIKE 'Threads_connected'")
                used = int(cursor.fetchone()[1])
            return used, limit

        return run_quietly("session count", room)

    def table_row_estimate(self, table: str) -> int | None:
        def estimate() -> int | None:
            with self.connection.cursor() as cursor:
                cursor.execute(
                    "SELECT table_rows FROM information_schema.tables "
                    "WHERE table_schema = DATABASE() AND table_name = %s",
                    [table],
                )
                row = cursor.fetchone()
            return None if row is None or row[0] is None else int(row[0])

        return run_quietly("row estimate", estimate)

    def plan_row_estimate(self, qs: Any) -> int | None:
        def estimate() -> int | None:
            # Django's QuerySet.explain() formats MySQL's plan as text; the row counts are
            # read from the plain EXPLAIN's columns.
            sql, params = compiled(qs)
            with self.connection.cursor() as cursor:
                cursor.execute("EXPLAIN " + sql, params)
                names = [column[0].lower() for column in cursor.description]
                first = cursor.fetchone()
            if first is None:
                return None
            rows = float(first[names.index("rows")] or 0)
            if "filtered" in names and first[names.index("filtered")] is not None:
                rows *= float(first[names.index("filtered")]) / 100
            return int(rows)

        try:
            return run_quietly("plan estimate", estimate)
        except (ValueError, IndexError, TypeError):
            return None

    def history_partitioning(self, model: type[Model]) -> MySQLPartitioning:
        return MySQLPartitioning(self.alias, model)
