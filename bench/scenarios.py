"""The scenarios of one system at a time: drain a backlog, pick up a trickle of jobs, drain
while others enqueue and purge. Each returns a JSON-able dict of what it measured."""

from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path
from typing import Any

from bench import ledger
from bench.common import LOG_DIR, OURS_VARIANTS, ctl, db, global_status, load_average, log
from bench.costs import per_job
from bench.procs import Workers


def wait_ledger(
    expected: int, timeout: float, workers: Workers | None = None, cost: dict[str, Any] | None = None
) -> int:
    """Wait until the ledger holds ``expected`` jobs. With ``cost``, note the worker command's
    CPU seconds and statements when the first job shows up and when the last one does."""
    conn = db(ledger.DB)
    deadline = time.monotonic() + timeout
    seen = 0
    while time.monotonic() < deadline:
        seen = ledger.count(conn)
        if cost is not None and workers is not None:
            if seen and "cpu_first" not in cost:
                cost["cpu_first"], cost["statements_first"] = workers.sample()
                cost["first_seen"] = seen
            if seen >= expected:
                cost["cpu_last"], cost["statements_last"] = workers.sample()
        if seen >= expected:
            break
        if workers is not None and all(p.poll() is not None for p in workers.procs):
            break
        time.sleep(0.05)
    conn.close()
    return seen


def drain(system: str, variant: str, workers: int, n: int, timeout: float) -> dict[str, Any]:
    """Backlog of ``n`` jobs, then the worker command; rate = n / (last - first handler call)."""
    ledger.reset()
    prefill(system, variant, n)  # empties the system's tables first
    before = global_status(("Innodb_deadlocks", "Innodb_row_lock_waits"))
    load = [load_average()]
    running = Workers(system, variant, workers).start()
    started = time.monotonic()
    cost: dict[str, Any] = {}
    try:
        seen = wait_ledger(n, timeout, running, cost)
        wall = time.monotonic() - started
        load.append(load_average())
        time.sleep(0.3)  # late duplicates reach the ledger too
    finally:
        running.stop()
    after = global_status(("Innodb_deadlocks", "Innodb_row_lock_waits"))
    conn = db(ledger.DB)
    summary = ledger.summary(conn)
    conn.close()
    span = (summary["last_at"] or 0) - (summary["first_at"] or 0)
    result = {
        "system": system,
        "variant": variant,
        "workers": workers,
        "n": n,
        "seen": seen,
        "rate": n / span if seen >= n and span > 0 else None,
        "wall_s": wall,
        "exactly_once": exactly_once(summary, n),
        "ledger": summary,
        "rss": running.rss(),
        # CPU of the worker command's processes and the statements they sent, per job, between
        # the first and the last job the driver saw in the ledger (bench/costs.py).
        **per_job(cost, n),
        "load": load,
        "deadlocks": after["Innodb_deadlocks"] - before["Innodb_deadlocks"],
        "lock_waits": after["Innodb_row_lock_waits"] - before["Innodb_row_lock_waits"],
    }
    rate = f"{result['rate']:,.0f} jobs/s" if result["rate"] else f"INCOMPLETE {seen}/{n}"
    log(
        f"  drain {system}/{variant} x{workers}: {rate}, exactly-once {result['exactly_once']}, "
        f"max RSS {result['rss']['max_process_mb']:.0f} MB, CPU {result['cpu_us_per_job'] or 0:.0f} µs/job, "
        f"{result['statements_per_job'] or 0:.3f} statements/job, load {load[0][:1]} -> {load[-1][:1]}"
    )
    return result


def exactly_once(summary: dict[str, Any], n: int, low: int = 1) -> str:
    problems = []
    if summary["jobs"] != n:
        problems.append(f"{summary['jobs']}/{n} jobs ran")
    if summary["runs"] != summary["jobs"]:
        problems.append(f"{summary['runs'] - summary['jobs']} duplicate runs")
    if summary["jobs"] and (summary["min_id"] != low or summary["max_id"] != low + n - 1):
        problems.append(f"ids {summary['min_id']}..{summary['max_id']}")
    return "ok" if not problems else "FAILED: " + ", ".join(problems)


def reset_system(system: str) -> None:
    ctl(system, "reset")


def prefill(system: str, variant: str, n: int) -> None:
    """Empty the system's tables, then enqueue ``n`` jobs in bulk (ids 1..n)."""
    if system == "dbqueue":
        ctl(system, "enqueue-bulk", "--reset", "--n", str(n), "--model", OURS_VARIANTS[variant][0])
    elif system == "raw":
        ctl(system, "enqueue-bulk", "--reset", "--n", str(n))
    else:
        ctl(system, "enqueue-bulk", "--reset", "--n", str(n), "--first", "1")


def pickup(system: str, trickle: int, idle_seconds: float) -> dict[str, Any]:
    """One idle worker; count its statements while idle, then trickle jobs and time pickup."""
    reset_system(system)
    ledger.reset()
    qdir = LOG_DIR / f"queries-{system}"
    qdir.mkdir(parents=True, exist_ok=True)
    for old in qdir.iterdir():
        old.unlink()
    variant = "lease" if system == "dbqueue" else "default"
    running = Workers(system, variant, 1, extra_env={"BENCH_COUNT_QUERIES": str(qdir)}).start()
    try:
        time.sleep(3.0)  # started and idle
        first, first_sent = _query_count(qdir), sum(running.sample()[1].values())
        time.sleep(idle_seconds)  # the idle window the statements are counted over
        idle_qps = (_query_count(qdir) - first) / idle_seconds
        idle_sent = (sum(running.sample()[1].values()) - first_sent) / idle_seconds
        args = ["trickle", "--n", str(trickle), "--gap", "0.15"]
        if system != "dbqueue":
            args += ["--first", "1"]
        sent = {int(k): v for k, v in ctl(system, *args)["sent"].items()}
        wait_ledger(len(sent), 10)
        time.sleep(0.2)
        conn = db(ledger.DB)
        seen = ledger.first_seen(conn)
        conn.close()
    finally:
        running.stop()
    latencies = sorted((seen[k] - t) * 1000 for k, t in sent.items() if k in seen)
    out = {
        "system": system,
        "jobs": len(sent),
        "picked": len(latencies),
        "p50_ms": _pct(latencies, 50),
        "p95_ms": _pct(latencies, 95),
        "idle_queries_per_s": idle_qps,
        # The same window counted at the driver (bench/stmtcount.py): with COMMIT and
        # SET autocommit, which Django's execute wrapper above does not see.
        "idle_statements_per_s": idle_sent,
    }
    log(
        f"  pickup {system}: p50 {out['p50_ms']:.0f} ms, p95 {out['p95_ms']:.0f} ms "
        f"({out['picked']}/{out['jobs']}), idle {idle_qps:.1f} queries/s ({idle_sent:.1f} statements/s)"
    )
    return out


def _query_count(qdir: Path) -> int:
    total = 0
    for entry in qdir.iterdir():
        if entry.suffix == ".tmp":
            continue
        try:
            total += int(entry.read_text() or 0)
        except (OSError, ValueError):
            pass
    return total


def _pct(values: list[float], pct: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(pct) - 1]


def contention(system: str, variant: str, n: int, extra: int, timeout: float) -> dict[str, Any]:
    """4 workers drain a backlog while one process enqueues one by one and another purges
    finished rows; InnoDB deadlock and lock-wait counters (server-wide) before and after."""
    ledger.reset()
    prefill(system, variant, n)
    names = ("Innodb_deadlocks", "Innodb_row_lock_waits", "Innodb_row_lock_time")
    if system == "dbqueue":
        table = "dbqapp_" + OURS_VARIANTS[variant][0].split(".")[1].lower()
        database, state = f"{ledger.PREFIX}_dbqueue", "queue_state"
    else:
        table, database, state = "job", f"{ledger.PREFIX}_raw", "state"
    # The server is shared: the same counters over an equal quiet window show the background.
    quiet_before = global_status(names)
    time.sleep(3)
    quiet_after = global_status(names)
    before = global_status(names)
    running = Workers(system, variant, 4).start()
    stop = threading.Event()
    purged = [0]

    def purge() -> None:
        conn = db(database)
        cur = conn.cursor()
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        while not stop.wait(0.1):
            cur.execute(f"DELETE FROM {table} WHERE {state} = 'succeeded' LIMIT 500")
            purged[0] += cur.rowcount
        conn.close()

    purger = threading.Thread(target=purge, daemon=True)
    started = time.monotonic()
    try:
        purger.start()
        model = ["--model", OURS_VARIANTS[variant][0]] if system == "dbqueue" else []
        ctl(system, "enqueue-one", "--n", str(extra), *model)
        seen = wait_ledger(n + extra, timeout, running)
        wall = time.monotonic() - started
        time.sleep(0.3)
    finally:
        stop.set()
        purger.join()
        running.stop()
    after = global_status(names)
    conn = db(ledger.DB)
    summary = ledger.summary(conn)
    conn.close()
    window = wall + 0.3
    scale = window / 3
    out = {
        "system": system,
        "variant": variant,
        "n": n + extra,
        "seen": seen,
        "wall_s": wall,
        "purged": purged[0],
        "exactly_once": exactly_once(summary, n + extra),
        "deadlocks": after["Innodb_deadlocks"] - before["Innodb_deadlocks"],
        "lock_waits": after["Innodb_row_lock_waits"] - before["Innodb_row_lock_waits"],
        "lock_time_ms": after["Innodb_row_lock_time"] - before["Innodb_row_lock_time"],
        "background_deadlocks": (quiet_after["Innodb_deadlocks"] - quiet_before["Innodb_deadlocks"]) * scale,
        "background_lock_waits": (
            quiet_after["Innodb_row_lock_waits"] - quiet_before["Innodb_row_lock_waits"]
        )
        * scale,
    }
    log(
        f"  contention {system}/{variant}: {out['deadlocks']} deadlocks, {out['lock_waits']} lock waits "
        f"({out['lock_time_ms']} ms), purged {out['purged']}, exactly-once {out['exactly_once']}"
    )
    return out
