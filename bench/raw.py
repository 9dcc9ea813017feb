"""The limit: a hand-written SKIP LOCKED queue loop over mysqlclient, no ORM, no framework.

    python bench/raw.py setup|reset
    python bench/raw.py enqueue-one --n N        # INSERT + commit per job
    python bench/raw.py enqueue-bulk --n N       # executemany, 1,000 rows per statement, one commit
    python bench/raw.py enqueue-bulk --payload --n N   # the same, rows with JSON payloads
    python bench/raw.py work --mode MODE --procs P

Modes: ``claim1`` (claim 1 row, ack it), ``claim100`` (claim 100, ack each with its own
UPDATE + commit), ``batch`` (claim 100, one ack UPDATE for the whole batch), ``batch500``
(the same with claims of 500, django_dbqueue's largest claim by default), ``atomic``
(claim 100, then per job the statements DESIGN.md's atomic mode requires, one anonymous
block per job as the previous core sent them on MariaDB: see :data:`ATOMIC_BLOCK`; used by
bench/atomic_ceiling.py, no longer by the benchmark's drains). A claim is one transaction
(``SELECT id … ORDER BY priority DESC, run_at, id LIMIT n FOR UPDATE SKIP LOCKED``,
``UPDATE … WHERE id IN (…)``, commit), like django_dbqueue's; acks are fenced by the claim's
token. Workers poll every 50 ms when idle and stop on SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from MySQLdb.constants import CLIENT

from bench import ledger, stmtcount
from bench.payloads import payload

DB = f"{ledger.PREFIX}_raw"
DDL = """CREATE TABLE IF NOT EXISTS job (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    state VARCHAR(16) NOT NULL DEFAULT 'ready',
    priority INT NOT NULL DEFAULT 0,
    run_at DATETIME(6) NOT NULL,
    attempts INT NOT NULL DEFAULT 0,
    token BIGINT NULL,
    locked_by VARCHAR(255) NULL,
    locked_until DATETIME(6) NULL,
    finished_at DATETIME(6) NULL,
    KEY job_claim (state, priority DESC, run_at)
) ENGINE=InnoDB"""

#: The attempt history of the ``atomic`` mode: django_dbqueue's table (columns and indexes).
#: The rows of the bulk-enqueue measurement: the job table with a JSON payload (MariaDB's JSON
#: is LONGTEXT with a json_valid() check, as Django's JSONField makes it).
PAYLOAD_DDL = DDL.replace("TABLE IF NOT EXISTS job (", "TABLE IF NOT EXISTS payload_job (").replace(
    "finished_at DATETIME(6) NULL,", "finished_at DATETIME(6) NULL,\n    payload JSON NOT NULL,"
)

ATTEMPT_DDL = """CREATE TABLE IF NOT EXISTS attempt (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    model VARCHAR(100) NOT NULL,
    object_id VARCHAR(64) NOT NULL,
    attempt INT UNSIGNED NOT NULL,
    worker_id VARCHAR(255) NOT NULL,
    enqueued_at DATETIME(6) NULL,
    due_at DATETIME(6) NULL,
    claimed_at DATETIME(6) NULL,
    finished_at DATETIME(6) NOT NULL,
    outcome VARCHAR(16) NOT NULL,
    error LONGTEXT NOT NULL,
    KEY attempt_row (model, object_id),
    KEY attempt_finished (finished_at)
) ENGINE=InnoDB"""

#: The lock of a job's row in ``atomic`` mode: the first statement of its transaction, fenced
#: by the claim's token (it changes nothing; the session counts it as matched).
ATOMIC_LOCK = "UPDATE job SET token = token WHERE id = {job} AND token = {token}"

#: One job's end in ``atomic`` mode, in one round trip: its fenced success, its attempt row
#: (only if the success was written), the commit, and the lock of the claim's next job, which
#: opens that job's transaction (a failed lock is swallowed: that job then locks for itself).
#: The same statements as the previous core's block (its module ``pipeline``, since removed),
#: minus its Python: the server's clock instead of literals, no reading of the result.
ATOMIC_BLOCK = (
    "BEGIN NOT ATOMIC "
    "UPDATE job SET state = 'succeeded', finished_at = UTC_TIMESTAMP(6), locked_until = NULL, "
    "token = -token WHERE id = {job} AND token = {token}; "
    "IF ROW_COUNT() > 0 THEN INSERT INTO attempt (model, object_id, attempt, worker_id, "
    "enqueued_at, due_at, claimed_at, finished_at, outcome, error) VALUES ('raw.job', '{job}', "
    "{attempt}, '{worker}', '{run_at}', '{run_at}', '{claimed_at}', UTC_TIMESTAMP(6), "
    "'succeeded', ''); END IF; "
    "COMMIT; "
    "{lock_next}"
    "END"
)
ATOMIC_LOCK_NEXT = "BEGIN DECLARE CONTINUE HANDLER FOR SQLEXCEPTION BEGIN END; {lock}; END; "

CLAIM = (
    "SELECT {columns} FROM job WHERE state = 'ready' AND run_at <= UTC_TIMESTAMP(6) "
    "ORDER BY priority DESC, run_at, id LIMIT %s FOR UPDATE SKIP LOCKED"
)

#: The success of one job, fenced by its claim's token (modes ``claim1``, ``claim100``).
ACK_ONE = (
    "UPDATE job SET state = 'succeeded', finished_at = UTC_TIMESTAMP(6), locked_until = NULL, "
    "token = -token WHERE id = %s AND token = %s"
)

#: The claim's columns in ``atomic`` mode: its attempt rows need the claimed rows' values, as
#: django_dbqueue's do.
ATOMIC_CLAIM_COLUMNS = "id, run_at, attempts + 1, UTC_TIMESTAMP(6)"


def connect(db: str = DB):
    # Matched rather than changed rows, as Django's sessions count: the atomic mode's lock
    # changes nothing and must count.
    conn = ledger.connect(db, client_flag=CLIENT.FOUND_ROWS)
    conn.cursor().execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    return conn


def setup(db: str = DB) -> None:
    conn = ledger.connect(None)
    cur = conn.cursor()
    cur.execute(f"CREATE DATABASE IF NOT EXISTS {db}")
    cur.execute(f"USE {db}")
    cur.execute(DDL)
    cur.execute(PAYLOAD_DDL)
    cur.execute(ATTEMPT_DDL)
    conn.close()


def reset(db: str = DB) -> None:
    setup(db)
    conn = connect(db)
    conn.cursor().execute("TRUNCATE TABLE job")
    conn.cursor().execute("TRUNCATE TABLE attempt")
    conn.cursor().execute("TRUNCATE TABLE payload_job")
    conn.close()


def enqueue_one(n: int) -> float:
    conn = connect()
    cur = conn.cursor()
    start = time.perf_counter()
    for _ in range(n):
        cur.execute("INSERT INTO job (run_at) VALUES (UTC_TIMESTAMP(6))")  # autocommit
    return time.perf_counter() - start


def enqueue_bulk(n: int, db: str = DB) -> float:
    conn = connect(db)
    cur = conn.cursor()
    start = time.perf_counter()
    cur.execute("START TRANSACTION")
    now = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(time.time() - 1))
    for first in range(0, n, 1000):
        cur.executemany("INSERT INTO job (run_at) VALUES (%s)", [(now,)] * min(1000, n - first))
    cur.execute("COMMIT")
    return time.perf_counter() - start


def enqueue_payloads(n: int, db: str = DB) -> float:
    """``n`` rows with JSON payloads (json.dumps of bench/payloads.py's, inside the clock), one
    multi-row INSERT per 1,000 rows (mysqlclient's executemany), one transaction."""
    conn = connect(db)
    cur = conn.cursor()
    cur.execute("TRUNCATE TABLE payload_job")
    start = time.perf_counter()
    cur.execute("START TRANSACTION")
    now = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(time.time() - 1))
    for first in range(0, n, 1000):
        rows = [(now, json.dumps(payload(i))) for i in range(first, min(first + 1000, n))]
        cur.executemany("INSERT INTO payload_job (run_at, payload) VALUES (%s, %s)", rows)
    cur.execute("COMMIT")
    return time.perf_counter() - start


#: Rows per claim by mode (100 where not named).
CLAIM_SIZES = {"claim1": 1, "batch500": 500}
#: Modes that ack a whole batch with one UPDATE.
BATCH_ACK = frozenset({"batch", "batch500"})


def work(
    mode: str, worker_id: str, *, db: str = DB, until_empty: bool = False, how: AtomicEnd | None = None
) -> int:
    """Drain ``db``'s job table the way ``mode`` says until SIGTERM (or, ``until_empty``, until
    a claim finds nothing); ``how`` sends an ``atomic`` job's end (default: the block)."""
    stopping = []
    signal.signal(signal.SIGTERM, lambda *a: stopping.append(1))
    conn = connect(db)
    cur = conn.cursor()
    size = CLAIM_SIZES.get(mode, 100)
    claim = CLAIM.format(columns=ATOMIC_CLAIM_COLUMNS if mode == "atomic" else "id")
    done = 0
    while not stopping:
        token = random.getrandbits(62) + 1
        rows = claim_batch(cur, claim, size, token, worker_id)
        ids = [row[0] for row in rows]
        if not ids:
            if until_empty:
                break
            time.sleep(0.05)
            continue
        if mode == "atomic":
            run_atomic(conn, rows, token, worker_id, how or BLOCK_END)
        else:
            for job_id in ids:
                ledger.record(job_id)  # the no-op handler
                if mode not in BATCH_ACK:
                    cur.execute(ACK_ONE, (job_id, token))  # autocommit: one commit per job
        if mode in BATCH_ACK:
            marks = ",".join(["%s"] * len(ids))
            cur.execute(
                "UPDATE job SET state = 'succeeded', finished_at = UTC_TIMESTAMP(6), "
                f"locked_until = NULL, token = -token WHERE id IN ({marks}) AND token = %s",
                (*ids, token),
            )
        done += len(ids)
    ledger.flush()
    return done


def claim_batch(cur: Any, claim: str, size: int, token: int, worker_id: str) -> list[tuple[Any, ...]]:
    """One claim transaction: up to ``size`` ready rows (the columns of ``claim``, id first)
    locked with SKIP LOCKED, then RUNNING under ``token`` with one UPDATE, committed."""
    cur.execute("START TRANSACTION")
    cur.execute(claim, (size,))
    rows = list(cur.fetchall())
    if rows:
        marks = ",".join(["%s"] * len(rows))
        cur.execute(
            "UPDATE job SET state = 'running', token = %s, locked_by = %s, "
            "locked_until = UTC_TIMESTAMP(6) + INTERVAL 300 SECOND, attempts = attempts + 1 "
            f"WHERE id IN ({marks})",
            (token, worker_id, *(row[0] for row in rows)),
        )
    cur.execute("COMMIT")
    return rows


class JobEnd(NamedTuple):
    """One atomic-mode job's values for the statements that end it."""

    job: int
    token: int
    attempt: int
    worker: str
    run_at: Any
    claimed_at: Any
    following: int | None  # the claim's next job, whose lock the end takes; None: the last


def send_one(cur: Any, sql: str) -> int:
    """Run one statement (a block is one) on the cursor ``cur``; the rows it counted."""
    return cur.execute(sql)


@dataclass(frozen=True)
class AtomicEnd:
    """How a job's end (success, attempt row, commit, the next job's lock) goes to the server:
    ``text`` makes the SQL, ``send`` runs it and returns the rows counted, which equal
    ``counted_when_locked`` when the success, its attempt row and the next lock all matched."""

    name: str
    text: Callable[[JobEnd], str]
    counted_when_locked: int = 3
    send: Callable[[Any, str], int] = send_one


def block_text(end: JobEnd) -> str:
    lock_next = (
        ATOMIC_LOCK_NEXT.format(lock=ATOMIC_LOCK.format(job=end.following, token=end.token))
        if end.following is not None
        else ""
    )
    values = end._asdict()
    del values["following"]
    return ATOMIC_BLOCK.format(**values, lock_next=lock_next)


#: What django_dbqueue sends on MariaDB: one anonymous block per job.
BLOCK_END = AtomicEnd("block", block_text)


def run_atomic(
    conn: Any, rows: list[tuple[Any, ...]], token: int, worker_id: str, how: AtomicEnd = BLOCK_END
) -> None:
    """One transaction per job, as DESIGN.md's atomic mode: lock its row (fenced), run the
    handler, write its success and attempt row, commit; each job's end and the next one's
    lock in one round trip (``how``). ``rows``: (id, run_at, attempt, claimed_at) as claimed."""
    cur = conn.cursor()
    cur.execute("SET autocommit = 0")
    locked = False
    for index, (job_id, run_at, attempt, claimed_at) in enumerate(rows):
        if not locked:  # the first job, or the previous end's lock failed: lock it now
            locked = bool(cur.execute(ATOMIC_LOCK.format(job=job_id, token=token)))
        if not locked:
            conn.rollback()
            continue  # no longer ours (cannot happen while the lease holds)
        ledger.record(job_id)  # the no-op handler, inside the job's transaction
        following = rows[index + 1][0] if index + 1 < len(rows) else None
        end = JobEnd(job_id, token, attempt, worker_id, run_at, claimed_at, following)
        counted = how.send(cur, how.text(end))
        locked = following is not None and counted == how.counted_when_locked
    cur.execute("SET autocommit = 1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "action", choices=["setup", "reset", "enqueue-one", "enqueue-bulk", "work", "remaining"]
    )
    parser.add_argument("--n", type=int, default=0)
    parser.add_argument(
        "--mode", choices=["claim1", "claim100", "batch", "batch500", "atomic"], default="batch"
    )
    parser.add_argument("--procs", type=int, default=1)
    parser.add_argument("--reset", action="store_true", help="empty the table first")
    parser.add_argument("--payload", action="store_true", help="enqueue-bulk: rows with JSON payloads")
    args = parser.parse_args()
    stmtcount.install()  # a drain's worker counts its statements (BENCH_COUNT_STATEMENTS)
    out: dict = {"system": "raw", "action": args.action}
    if args.reset:
        reset()
    if args.action == "setup":
        setup()
    elif args.action == "reset":
        reset()
    elif args.action == "enqueue-one":
        out.update(n=args.n, seconds=enqueue_one(args.n))
    elif args.action == "enqueue-bulk" and args.payload:
        api = "executemany of rows with a JSON payload each, 1,000 rows per INSERT"
        out.update(n=args.n, seconds=enqueue_payloads(args.n), api=api)
    elif args.action == "enqueue-bulk":
        out.update(n=args.n, seconds=enqueue_bulk(args.n), api="executemany, 1,000 rows per INSERT")
    elif args.action == "remaining":
        cur = connect().cursor()
        cur.execute("SELECT COUNT(*) FROM job WHERE state <> 'succeeded'")
        out["remaining"] = int(cur.fetchone()[0])
    elif args.action == "work":
        children = []
        for index in range(args.procs):
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    work(args.mode, f"raw-{os.getpid()}-{index}")
                except BaseException:  # noqa: BLE001 - report, then exit non-zero
                    import traceback

                    traceback.print_exc()
                    code = 1
                os._exit(code)
            children.append(pid)

        def forward(signum, frame):
            for pid in children:
                os.kill(pid, signal.SIGTERM)

        signal.signal(signal.SIGTERM, forward)
        for pid in children:
            os.waitpid(pid, 0)
        return
    print(json.dumps(out))


if __name__ == "__main__":
    main()
