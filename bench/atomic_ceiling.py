"""What atomic mode's statements cost in raw SQL, sent four ways, against "ack each".

    .venv/bin/python bench/atomic_ceiling.py [--procs 1,4] [--rounds 5] [--jobs 6000]
    make bench-atomic-ceiling

Issue #3 asks atomic mode (one transaction per job) for 0.70x of the raw "claim 100, ack each"
loop, whose job is one fenced UPDATE and its commit. DESIGN.md's atomic job also takes the
row's fenced lock before the handler and writes an attempt row, so this measures that contract
with no framework at all: the same claim, then per job

* ``ack``: the raw loop of the benchmark (``bench/raw.py``, mode ``claim100``);
* ``block``: lock, success, attempt row, commit as one anonymous ``BEGIN NOT ATOMIC`` block
  per job, the next job's lock included: what django_dbqueue sends on MariaDB
  (``bench/raw.py``, mode ``atomic``);
* ``procedure``: the very statements of that block as a stored procedure, one ``CALL`` per job
  (the server parses the block once per session instead of once per job);
* ``statements``: the same statements as one multi-statement text (a reply per statement);
* ``block-no-history``: the block without the attempt row (``DBQUEUE_HISTORY = False``).

Runs are interleaved (every mode once per round, in a shuffled order) and every run is
checked: each job ran its no-op handler once (the benchmark's ledger), ended SUCCEEDED, and
has one attempt row where the mode writes them. Prints a Markdown table: each mode's median
rate and the median of its per-round ratios to ``ack`` (a round's runs share the same minutes
of a noisy machine). Uses its own databases (``bench_ceiling``, ``bench_ceiling_ledger``).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# Its own ledger: never the one of a benchmark that may be running.
os.environ.setdefault("BENCH_LEDGER_DB", "bench_ceiling_ledger")

from bench import ledger, raw

DB = os.environ.get("BENCH_CEILING_DB", "bench_ceiling")
PROCEDURE = "ceiling_job_end"


def procedure_ddl() -> str:
    """The block of ``raw.ATOMIC_BLOCK`` as a procedure body: the job's values become its
    parameters (``p_job``…), the next job's lock runs when there is one."""
    body = raw.ATOMIC_BLOCK.format(
        job="p_job",
        token="p_token",
        attempt="p_attempt",
        worker="p_worker",
        run_at="p_run_at",
        claimed_at="p_claimed_at",
        lock_next="IF p_next IS NOT NULL THEN "
        + raw.ATOMIC_LOCK_NEXT.format(lock=raw.ATOMIC_LOCK.format(job="p_next", token="p_token"))
        + "END IF; ",
    )
    body = re.sub(r"'(p_\w+)'", r"\1", body)  # parameters, not the quoted literals of the block
    body = body.replace("BEGIN NOT ATOMIC", "BEGIN", 1)
    return (
        f"CREATE OR REPLACE PROCEDURE {PROCEDURE}(p_job BIGINT, p_token BIGINT, p_attempt INT, "
        "p_worker VARCHAR(255), p_run_at DATETIME(6), p_claimed_at DATETIME(6), p_next BIGINT) " + body
    )


def procedure_text(end: raw.JobEnd) -> str:
    following = "NULL" if end.following is None else end.following
    return (
        f"CALL {PROCEDURE}({end.job}, {end.token}, {end.attempt}, '{end.worker}', '{end.run_at}', "
        f"'{end.claimed_at}', {following})"
    )


def statements_text(end: raw.JobEnd) -> str:
    """The block's statements without the block: the attempt row's INSERT is guarded by
    ``ROW_COUNT()`` of the UPDATE before it, as the block's ``IF`` is."""
    sql = (
        "UPDATE job SET state = 'succeeded', finished_at = UTC_TIMESTAMP(6), locked_until = NULL, "
        f"token = -token WHERE id = {end.job} AND token = {end.token}; "
        "INSERT INTO attempt (model, object_id, attempt, worker_id, enqueued_at, due_at, claimed_at, "
        f"finished_at, outcome, error) SELECT 'raw.job', '{end.job}', {end.attempt}, '{end.worker}', "
        f"'{end.run_at}', '{end.run_at}', '{end.claimed_at}', UTC_TIMESTAMP(6), 'succeeded', '' "
        "FROM DUAL WHERE ROW_COUNT() > 0; COMMIT"
    )
    if end.following is not None:
        sql += "; " + raw.ATOMIC_LOCK.format(job=end.following, token=end.token)
    return sql


def send_statements(cur: Any, sql: str) -> int:
    """Run a multi-statement text, reading every reply; the rows counted by all of them."""
    conn = cur.connection
    conn.query(sql.encode())
    counted = max(conn.affected_rows(), 0)
    while conn.next_result() == 0:
        counted += max(conn.affected_rows(), 0)
    return counted


def no_history_text(end: raw.JobEnd) -> str:
    return re.sub(r"IF ROW_COUNT\(\) > 0 THEN .*? END IF; ", "", raw.block_text(end))


ENDS = {
    "block": raw.BLOCK_END,
    "procedure": raw.AtomicEnd("procedure", procedure_text),
    "statements": raw.AtomicEnd("statements", statements_text, send=send_statements),
    "block-no-history": raw.AtomicEnd("block-no-history", no_history_text, counted_when_locked=2),
}
MODES = ["ack", *ENDS]
HISTORY_MODES = frozenset({"block", "procedure", "statements"})


def prepare(jobs: int) -> None:
    """Empty tables with ``jobs`` ready rows (due a second ago), the procedure, an empty ledger."""
    raw.reset(DB)
    conn = raw.connect(DB)
    conn.cursor().execute(procedure_ddl())
    conn.close()
    raw.enqueue_bulk(jobs, DB)
    ledger.reset()


def drain(mode: str, index: int, ready: Any) -> None:
    """One worker: claims of 100 until none is left, each job ended the way ``mode`` says."""
    ready.wait()
    raw.work(
        "atomic" if mode in ENDS else "claim100",
        f"ceiling-{os.getpid()}-{index}",
        db=DB,
        until_empty=True,
        how=ENDS.get(mode),
    )


def run(mode: str, procs: int, jobs: int) -> float:
    """Jobs per second of one drain of ``jobs`` rows by ``procs`` processes, checked."""
    prepare(jobs)
    context = multiprocessing.get_context("fork")
    ready = context.Barrier(procs + 1)
    workers = [context.Process(target=drain, args=(mode, index, ready)) for index in range(procs)]
    for worker in workers:
        worker.start()
    ready.wait()
    start = time.perf_counter()
    for worker in workers:
        worker.join()
    seconds = time.perf_counter() - start
    failed = [worker.exitcode for worker in workers if worker.exitcode != 0]
    if failed:
        raise SystemExit(f"{mode}: a worker exited with {failed[0]}")
    check(mode, jobs)
    return jobs / seconds


def check(mode: str, jobs: int) -> None:
    """Every job's handler ran once, every row SUCCEEDED, one attempt row each where written."""
    conn = raw.connect(DB)
    cur = conn.cursor()
    cur.execute("SELECT COUNT(*) FROM job WHERE state = 'succeeded'")
    (succeeded,) = cur.fetchone()
    cur.execute("SELECT COUNT(*), COUNT(DISTINCT object_id) FROM attempt")
    attempts, attempted_jobs = cur.fetchone()
    ran = ledger.summary(ledger.connect())
    expected_attempts = jobs if mode in HISTORY_MODES else 0
    problems = []
    if ran["jobs"] != jobs or ran["runs"] != jobs:
        problems.append(f"{ran['jobs']} jobs ran {ran['runs']} times in all")
    if succeeded != jobs:
        problems.append(f"{succeeded} rows succeeded")
    if attempts != expected_attempts or attempted_jobs != expected_attempts:
        problems.append(f"{attempts} attempt rows for {attempted_jobs} jobs (expected {expected_attempts})")
    if problems:
        raise SystemExit(f"{mode}: of {jobs} jobs, " + "; ".join(problems))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", default="1,4", help="worker processes per run, comma-separated")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=6000, help="jobs per run")
    parser.add_argument("--modes", default=",".join(MODES), help=f"of {', '.join(MODES)}")
    args = parser.parse_args()
    modes = args.modes.split(",")
    unknown = sorted(set(modes) - set(MODES))
    if unknown or "ack" not in modes:
        parser.error(f"--modes: {', '.join(unknown) or 'ack is the baseline and must be in'}")
    try:
        procs = [int(p) for p in args.procs.split(",")]
    except ValueError:
        parser.error(f"--procs: whole numbers separated by commas, not {args.procs!r}")
    if min(procs) < 1 or args.jobs < 100 * max(procs) or args.rounds < 1:
        parser.error("--procs at least 1, --jobs at least one claim of 100 per process, --rounds at least 1")
    rates: dict[tuple[str, int], list[float]] = {}
    ratios: dict[tuple[str, int], list[float]] = {}
    total = args.rounds * len(procs) * len(modes)
    for _ in range(args.rounds):
        for count in procs:
            this_round = {}
            for mode in random.sample(modes, len(modes)):
                this_round[mode] = run(mode, count, args.jobs)
                rates.setdefault((mode, count), []).append(this_round[mode])
                done = sum(len(v) for v in rates.values())
                print(f"[{done}/{total}] {count} proc, {mode}: {this_round[mode]:,.0f} jobs/s", flush=True)
            # Within a round the modes share the same minutes of this noisy machine.
            for mode, rate in this_round.items():
                ratios.setdefault((mode, count), []).append(rate / this_round["ack"])
    print()
    print(
        "| median jobs/s (median of the rounds' ratios to ack) | "
        + " | ".join(f"{p} proc" for p in procs)
        + " |"
    )
    print("|---|" + "---|" * len(procs))
    for mode in modes:
        cells = [
            f"{statistics.median(rates[(mode, count)]):,.0f} ({statistics.median(ratios[(mode, count)]):.2f})"
            for count in procs
        ]
        print(f"| {mode} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
