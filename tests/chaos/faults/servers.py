"""The shared database servers, as the fault table uses them: a fresh database per scenario, a
non-root MariaDB user (``read_only`` does not bind root), and the read-only switches, always
switched back.

Administrative statements go through the drivers directly: this runs outside any Django
project (the scenarios' own processes are the Django ones)."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

import MySQLdb
import psycopg

MARIADB_ADMIN = os.environ.get("FAULTS_MARIADB_URL", "mysql://root@127.0.0.1:3306/mysql")
POSTGRES_ADMIN = os.environ.get("FAULTS_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres")
#: The MariaDB user whose sessions ``SET GLOBAL read_only=ON`` binds (no SUPER, no READ_ONLY ADMIN).
WORKER_USER = "dbq_faults_worker"


def _mariadb(url: str = MARIADB_ADMIN) -> MySQLdb.Connection:
    parts = urlsplit(url)
    conn = MySQLdb.connect(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 3306,
        user=parts.username or "root",
        password=parts.password or "",
        connect_timeout=10,
    )
    conn.autocommit(True)
    return conn


def _postgres(url: str = POSTGRES_ADMIN) -> psycopg.Connection:
    return psycopg.connect(url, autocommit=True, connect_timeout=10)


def _run(server: str, *statements: tuple[str, tuple | None]) -> list[tuple]:
    conn = _mariadb() if server == "mariadb" else _postgres()
    try:
        rows: list[tuple] = []
        for sql, params in statements:
            cursor = conn.cursor()
            if server == "mariadb":
                params = params or ()  # always formatted: '%%' stands for '%'
            cursor.execute(sql, params)
            if cursor.description:
                rows.extend(cursor.fetchall())
            cursor.close()
        return rows
    finally:
        conn.close()


@contextmanager
def fresh_database(server: str, name: str, own_user: bool = False) -> Iterator[str]:
    """Create database ``name`` (dropped first if a failed run left it) and yield its URL;
    drop it (and the user) afterwards. ``own_user``: a MariaDB user without SUPER connects."""
    admin = urlsplit(MARIADB_ADMIN if server == "mariadb" else POSTGRES_ADMIN)
    host = f"{admin.hostname}:{admin.port or (3306 if server == 'mariadb' else 5432)}"
    if server == "mariadb":
        _run(server, (f"DROP DATABASE IF EXISTS `{name}`", None), (f"CREATE DATABASE `{name}`", None))
        url = f"mysql://{admin.username or 'root'}@{host}/{name}"
        if own_user:
            password = secrets.token_hex(12)
            _run(
                server,
                (f"DROP USER IF EXISTS '{WORKER_USER}'@'%%'", None),
                (f"CREATE USER '{WORKER_USER}'@'%%' IDENTIFIED BY %s", (password,)),
                (f"GRANT ALL PRIVILEGES ON `{name}`.* TO '{WORKER_USER}'@'%%'", None),
            )
            url = f"mysql://{WORKER_USER}:{password}@{host}/{name}"
    else:
        _run(
            server,
            (f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', None),
            (f'CREATE DATABASE "{name}"', None),
        )
        url = f"postgres://{admin.username or 'postgres'}@{host}/{name}"
    try:
        yield url
    finally:
        if server == "mariadb":
            if own_user:  # whatever became of the scenario: the server is writable again
                _run(
                    server,
                    ("SET GLOBAL read_only = OFF", None),
                    (f"DROP USER IF EXISTS '{WORKER_USER}'@'%%'", None),
                )
            _run(server, (f"DROP DATABASE IF EXISTS `{name}`", None))
        else:
            _run(server, (f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', None))


@contextmanager
def read_only(server: str, name: str) -> Iterator[None]:
    """The database refuses writes until the block ends (then it is switched back, whatever
    happened). MariaDB: ``SET GLOBAL read_only`` (binds the non-root worker user's sessions at
    once). PostgreSQL: ``default_transaction_read_only`` on the database binds new sessions
    only, so the workers' sessions are ended too: they reconnect into read-only sessions, as
    after a fail-over to a replica."""
    try:
        if server == "mariadb":
            _run(server, ("SET GLOBAL read_only = ON", None))
        else:
            _run(
                server,
                (f'ALTER DATABASE "{name}" SET default_transaction_read_only = on', None),
                (
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = %s AND pid <> pg_backend_pid()",
                    (name,),
                ),
            )
        yield
    finally:
        if server == "mariadb":
            _run(server, ("SET GLOBAL read_only = OFF", None))
        else:
            _run(server, (f'ALTER DATABASE "{name}" RESET default_transaction_read_only', None))


def max_connections(server: str) -> int:
    sql = "SELECT @@max_connections" if server == "mariadb" else "SHOW max_connections"
    return int(_run(server, (sql, None))[0][0])


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"
