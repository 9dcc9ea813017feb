"""The exactly-once ledger every benchmarked handler writes to.

A handler calls :func:`record` with its job's id: that appends ``(id, time)`` to a buffer of
the process, and a daemon thread (one per process, started on first use, with its own
mysqlclient connection) writes the buffer every ``FLUSH_EVERY`` seconds with
``INSERT … ON DUPLICATE KEY UPDATE runs = runs + 1``. The ledger's primary key is the job
id, so a job that ran twice shows ``runs = 2``; a job that never ran has no row.

The same code runs in every system's worker (ours, the peers', the raw-SQL loop), so its
cost (a list append per job, one multi-row INSERT per 50 ms per process) is the same for
all. It lives in its own database (``bench_ledger``) so the queue tables stay untouched.
"""

from __future__ import annotations

import atexit
import multiprocessing.util
import os
import threading
import time

import MySQLdb
from MySQLdb.connections import Connection as _Connection

#: The prefix of every database the benchmark makes (``bench_dbqueue``, ``bench_raw``, …):
#: BENCH_DB_PREFIX=h_me keeps a run of one's own apart from others' on a shared server.
PREFIX = os.environ.get("BENCH_DB_PREFIX", "bench")
DB = os.environ.get("BENCH_LEDGER_DB", f"{PREFIX}_ledger")
FLUSH_EVERY = 0.05

DDL = """CREATE TABLE IF NOT EXISTS ledger (
    job_id BIGINT NOT NULL PRIMARY KEY,
    runs INT NOT NULL,
    first_at DOUBLE NOT NULL,
    last_at DOUBLE NOT NULL,
    pid INT NOT NULL
) ENGINE=InnoDB"""

# Placeholders only in VALUES (…): mysqlclient then sends one multi-row INSERT per flush (a
# literal there would make executemany() loop, one statement and one commit per job).
INSERT = (
    "INSERT INTO ledger (job_id, runs, first_at, last_at, pid) VALUES (%s, %s, %s, %s, %s) "
    "ON DUPLICATE KEY UPDATE runs = runs + 1, last_at = VALUES(last_at)"
)


class UncountedConnection(_Connection):
    """The ledger's own connections: bench/stmtcount.py leaves them out of a worker's statements
    (they are the benchmark's, and cost every system the same)."""

    bench_uncounted = True


def connect(db: str | None = DB, client_flag: int = 0, counted: bool = True) -> MySQLdb.Connection:
    kwargs = {
        "host": os.environ.get("BENCH_DB_HOST", "127.0.0.1"),
        "port": int(os.environ.get("BENCH_DB_PORT", "3306")),
        "user": os.environ.get("BENCH_DB_USER", "root"),
        "password": os.environ.get("BENCH_DB_PASSWORD", ""),
        "charset": "utf8mb4",
        "autocommit": True,
        "client_flag": client_flag,
    }
    if db:
        kwargs["database"] = db
    return MySQLdb.connect(**kwargs) if counted else UncountedConnection(**kwargs)


class _Recorder:
    def __init__(self) -> None:
        self.buffer: list[tuple[int, int, float, float, int]] = []
        self.lock = threading.Lock()
        self.write_lock = threading.Lock()
        self.pid = 0
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.pid = os.getpid()
        self.buffer = []
        self.lock = threading.Lock()
        self.write_lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="bench-ledger", daemon=True)
        self.thread.start()
        # A process that exits normally (or a multiprocessing child, e.g. a django-q2 worker
        # that is recycled) writes what it still holds; os._exit() skips this, so the
        # driver waits for every job in the ledger before it stops any worker.
        atexit.register(self.flush)
        multiprocessing.util.Finalize(self, self.flush, exitpriority=100)

    def _run(self) -> None:
        conn = connect(counted=False)
        while True:
            time.sleep(FLUSH_EVERY)
            self.flush(conn)

    def flush(self, conn: MySQLdb.Connection | None = None) -> None:
        # One writer at a time, so a final flush() waits for the thread's write in flight.
        with self.write_lock:
            with self.lock:
                rows, self.buffer = self.buffer, []
            if not rows:
                return
            own = conn is None
            conn = conn or connect(counted=False)
            try:
                conn.cursor().executemany(INSERT, rows)
            finally:
                if own:
                    conn.close()


_recorder = _Recorder()


def record(job_id: int) -> None:
    """Note that the handler of ``job_id`` ran (cheap: a list append)."""
    if _recorder.pid != os.getpid():
        _recorder.start()
    now = time.time()
    with _recorder.lock:
        _recorder.buffer.append((job_id, 1, now, now, _recorder.pid))


def flush() -> None:
    """Write what this process recorded now (the raw-SQL worker calls it before exiting)."""
    if _recorder.pid == os.getpid():
        _recorder.flush()


def reset() -> None:
    conn = connect(None)
    cur = conn.cursor()
    cur.execute(f"CREATE DATABASE IF NOT EXISTS {DB}")
    cur.execute(f"USE {DB}")
    cur.execute(DDL)
    cur.execute("TRUNCATE TABLE ledger")
    conn.close()


def summary(conn: MySQLdb.Connection) -> dict:
    cur = conn.cursor()
    cur.execute(
        "SELECT COUNT(*), COALESCE(SUM(runs), 0), MIN(first_at), MAX(first_at), MIN(job_id), "
        "MAX(job_id), COUNT(DISTINCT pid) FROM ledger"
    )
    count, runs, first, last, low, high, pids = cur.fetchone()
    return {
        "jobs": int(count),
        "runs": int(runs),
        "first_at": first,
        "last_at": last,
        "min_id": low,
        "max_id": high,
        "processes": int(pids),
    }


def count(conn: MySQLdb.Connection) -> int:
    cur = conn.cursor()
    cur.execute("SELECT COUNT(*) FROM ledger")
    return int(cur.fetchone()[0])


def first_seen(conn: MySQLdb.Connection) -> dict[int, float]:
    cur = conn.cursor()
    cur.execute("SELECT job_id, first_at FROM ledger")
    return {int(job_id): at for job_id, at in cur.fetchall()}
