"""Benchmark django_dbqueue against its peers and the raw-SQL limit; rewrite BENCHMARKS.md.

    python bench/run.py            # the full run (make bench)
    python bench/run.py --quick    # small N, one run: checks the harness (make bench-quick)

Runs in the benchmark virtualenv (bench/.venv-peers: the peers, mysqlclient, matplotlib);
django_dbqueue runs in the project's .venv. Every system uses its own MariaDB database on
the same server, its public API and its own worker command. See BENCHMARKS.md for what
each scenario does.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import ledger  # noqa: E402

OURS_PY = os.environ.get("BENCH_OURS_PYTHON", str(ROOT / ".venv" / "bin" / "python"))
PEERS_PY = os.environ.get("BENCH_PEERS_PYTHON", sys.executable)
MANAGE = str(ROOT / "bench" / "manage.py")
RAW = str(ROOT / "bench" / "raw.py")
OUT_MD = ROOT / "BENCHMARKS.md"
OUT_PNG = ROOT / "bench" / "benchmarks.png"
LOG_DIR = ROOT / "bench" / "out"

WORKER_COUNTS = (1, 2, 4)
PEERS = ("djqueue", "tasksdb", "q2")
PEER_NAMES = {
    "djqueue": "dj_queue",
    "tasksdb": "django-tasks-db",
    "q2": "django-q2 (ORM broker)",
}
OURS_VARIANTS = {
    "lease": ("dbqapp.NoopJob", "django_dbqueue, lease mode (batched outcomes)"),
    "lease-nohist": ("dbqapp.NoopJob", "django_dbqueue, lease mode, attempt history off"),
    "atomic": ("dbqapp.AtomicJob", "django_dbqueue, atomic mode (1 job per transaction)"),
    "atomic-nohist": ("dbqapp.AtomicJob", "django_dbqueue, atomic mode, attempt history off"),
    "grouped": ("dbqapp.GroupedJob", "django_dbqueue, atomic mode, 100 jobs per transaction"),
}
RAW_VARIANTS = {
    "claim1": "raw SQL, claim 1 (SKIP LOCKED), ack each",
    "claim100": "raw SQL, claim 100, ack each",
    "atomic": "raw SQL, claim 100, atomic mode's statements per job (one block each)",
    "batch": "raw SQL, claim 100, one ack UPDATE per batch (the limit)",
    "batch500": "raw SQL, claim 500, one ack UPDATE per batch (django_dbqueue's largest claim)",
}


def log(message: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {message}", flush=True)


ERRORS: list[str] = []


def attempt(what: str, function: Any, *args: Any, **kwargs: Any) -> Any:
    """Run one scenario; a failure is logged and reported, and the run goes on."""
    try:
        return function(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - one broken scenario must not lose the others
        message = f"{what}: {type(exc).__name__}: {str(exc).strip()[-600:]}"
        log("  ERROR " + message)
        ERRORS.append(message)
        return None


# -- processes -------------------------------------------------------------------------------


def system_env(system: str, workers: int = 1, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(BENCH_SYSTEM=system, BENCH_WORKERS=str(workers), PYTHONUNBUFFERED="1", **extra)
    env["PYTHONPATH"] = str(ROOT)
    return env


def python_for(system: str) -> str:
    return OURS_PY if system in ("dbqueue", "raw") else PEERS_PY


def ctl(system: str, *args: str, timeout: float = 1800) -> dict[str, Any]:
    """Run a benchctl action in the system's own Django environment; return its JSON."""
    if system == "raw":
        argv = [python_for(system), RAW, *args]
    else:
        argv = [python_for(system), MANAGE, "benchctl", *args]
    done = subprocess.run(
        argv, env=system_env(system), capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def worker_commands(system: str, variant: str, workers: int) -> list[list[str]]:
    """The system's own worker command(s) for ``workers`` worker processes."""
    if system == "dbqueue":
        model = OURS_VARIANTS[variant][0]
        return [[OURS_PY, MANAGE, "runqueue", model, "--concurrency", str(workers)]]  # its defaults
    if system == "raw":
        return [[OURS_PY, RAW, "work", "--mode", variant, "--procs", str(workers)]]
    if system == "tasksdb":  # one job at a time per process: start N processes
        return [
            [PEERS_PY, MANAGE, "db_worker", "--interval", str(PEER_POLL), "--no-startup-delay", "--no-reload"]
            for _ in range(workers)
        ]
    if system == "djqueue":
        return [[PEERS_PY, MANAGE, "dj_queue", "--skip-recurring"]]
    if system == "q2":
        return [[PEERS_PY, MANAGE, "qcluster"]]
    raise ValueError(system)


PEER_POLL = 0.1


@dataclass
class Workers:
    """A running worker command (or several), with RSS sampling of its process tree."""

    system: str
    variant: str
    workers: int
    extra_env: dict[str, str] = field(default_factory=dict)
    procs: list[subprocess.Popen] = field(default_factory=list)
    rss_max: dict[int, int] = field(default_factory=dict)
    seen: set[int] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Workers:
        env = system_env(self.system, self.workers, **self.extra_env)
        if self.variant.endswith("-nohist"):
            env["BENCH_DBQ_HISTORY"] = "0"  # DBQUEUE_HISTORY = False
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        logfile = open(LOG_DIR / f"{self.system}-{self.variant}-{self.workers}.log", "ab")
        for argv in worker_commands(self.system, self.variant, self.workers):
            self.procs.append(
                subprocess.Popen(argv, env=env, stdout=logfile, stderr=logfile, start_new_session=True)
            )
        threading.Thread(target=self._sample, daemon=True).start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.25):
            for pid in self.tree():
                rss = _rss_kb(pid)
                if rss:
                    self.seen.add(pid)
                    self.rss_max[pid] = max(self.rss_max.get(pid, 0), rss)

    def tree(self) -> list[int]:
        roots = [p.pid for p in self.procs]
        children: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
        found, todo = [], list(roots)
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo.extend(children.get(pid, []))
        return found

    def stop(self) -> None:
        self._stop.set()
        pids = set(self.tree())
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in self.procs:
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        time.sleep(0.2)
        for pid in pids:  # children in their own process groups (our runqueue, q2's workers)
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def rss(self) -> dict[str, float]:
        values = sorted(self.rss_max.values())
        return {
            "max_process_mb": values[-1] / 1024 if values else 0.0,
            "processes": len(values),
            "total_mb": sum(values) / 1024,
        }


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time used so far by these processes (all their threads)."""
    ticks = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


# -- the database ----------------------------------------------------------------------------


def db(database: str | None = None):
    return ledger.connect(database)


def global_status(names: tuple[str, ...]) -> dict[str, int]:
    conn = db()
    cur = conn.cursor()
    marks = ",".join(["%s"] * len(names))
    cur.execute(f"SHOW GLOBAL STATUS WHERE Variable_name IN ({marks})", names)
    values = {name: int(value) for name, value in cur.fetchall()}
    conn.close()
    return values


def prepare_databases() -> None:
    conn = db(None)
    cur = conn.cursor()
    for name in ("bench_dbqueue", "bench_tasksdb", "bench_djqueue", "bench_q2"):
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {name} CHARACTER SET utf8mb4")
    conn.close()
    ledger.reset()
    ctl("raw", "setup")
    for system in ("dbqueue", *PEERS):
        subprocess.run([python_for(system), MANAGE, "migrate", "-v0"], env=system_env(system), check=True)


# -- scenarios -------------------------------------------------------------------------------


def wait_ledger(
    expected: int, timeout: float, workers: Workers | None = None, cpu: dict[str, float] | None = None
) -> int:
    """Wait until the ledger holds ``expected`` jobs. With ``cpu``, note the worker command's
    CPU seconds when the first job shows up and when the last one does."""
    conn = db(ledger.DB)
    deadline = time.monotonic() + timeout
    seen = 0
    while time.monotonic() < deadline:
        seen = ledger.count(conn)
        if cpu is not None and workers is not None:
            if seen and "first" not in cpu:
                cpu["first"], cpu["first_seen"] = cpu_seconds(workers.tree()), seen
            if seen >= expected:
                cpu["last"] = cpu_seconds(workers.tree())
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
    running = Workers(system, variant, workers).start()
    started = time.monotonic()
    cpu: dict[str, float] = {}
    try:
        seen = wait_ledger(n, timeout, running, cpu)
        wall = time.monotonic() - started
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
        # CPU of the worker command's processes per job, between the first and the last job
        # the driver saw in the ledger (processes that exit meanwhile are not counted).
        "cpu_us_per_job": (cpu["last"] - cpu["first"]) * 1e6 / (n - cpu["first_seen"])
        if "last" in cpu and n > cpu["first_seen"]
        else None,
        "deadlocks": after["Innodb_deadlocks"] - before["Innodb_deadlocks"],
        "lock_waits": after["Innodb_row_lock_waits"] - before["Innodb_row_lock_waits"],
    }
    rate = f"{result['rate']:,.0f} jobs/s" if result["rate"] else f"INCOMPLETE {seen}/{n}"
    log(
        f"  drain {system}/{variant} x{workers}: {rate}, exactly-once {result['exactly_once']}, "
        f"max RSS {result['rss']['max_process_mb']:.0f} MB, CPU {result['cpu_us_per_job'] or 0:.0f} µs/job"
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


#: Measurements per enqueue figure of a run (their median is the figure). One takes well under
#: a second, so each system is measured this often, the systems taking turns, and a slow
#: minute of the shared machine falls on all of them rather than deciding one figure.
ENQUEUE_REPEATS = 5
#: The pair whose ratio is a target: measured back to back in every repeat (which goes first
#: alternates), so that each ratio compares the same moments of the shared machine.
ENQUEUE_PAIR = ("dbqueue", "raw")


def enqueue_once(system: str, n_one: int, n_bulk: int) -> dict[str, Any]:
    """One measurement of each enqueue kind of ``system``, each on an emptied table."""
    out: dict[str, Any] = {}
    reset_system(system)
    out["one"] = n_one / ctl(system, "enqueue-one", "--n", str(n_one))["seconds"]
    if system == "q2":
        out["bulk"], out["bulk_api"] = None, "none (no bulk enqueue API)"
    else:
        reset_system(system)
        bulk = ctl(system, "enqueue-bulk", "--n", str(n_bulk))
        out["bulk"], out["bulk_api"] = n_bulk / bulk["seconds"], bulk.get("api", "")
    reset_system(system)
    return out


def enqueue(order: list[str], n_one: int, n_bulk: int) -> list[dict[str, Any]]:
    """The enqueue figures of one run: every system ENQUEUE_REPEATS times, taking turns."""
    measured: dict[str, list[dict[str, Any]]] = {system: [] for system in order}
    pairs: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for repeat in range(ENQUEUE_REPEATS):
        this_repeat: dict[str, dict[str, Any]] = {}
        for system in paired_turns(order[repeat:] + order[:repeat], first=ENQUEUE_PAIR[repeat % 2]):
            item = attempt(f"enqueue {system}", enqueue_once, system, n_one, n_bulk)
            if item:
                measured[system].append(item)
                this_repeat[system] = item
        if all(system in this_repeat for system in ENQUEUE_PAIR):
            pairs.append((this_repeat[ENQUEUE_PAIR[0]], this_repeat[ENQUEUE_PAIR[1]]))
    figures = []
    for system, items in measured.items():
        if not items:
            continue
        out: dict[str, Any] = {"system": system, "bulk_api": items[0]["bulk_api"]}
        for kind in ("one", "bulk"):
            out[f"{kind}_each"] = [item[kind] for item in items]
            known = [rate for rate in out[f"{kind}_each"] if rate is not None]
            out[kind] = statistics.median(known) if known else None
        if system == ENQUEUE_PAIR[0] and pairs:
            for kind in ("one", "bulk"):
                ratios = [ours[kind] / raw[kind] for ours, raw in pairs if ours[kind] and raw[kind]]
                out[f"{kind}_ratio_each"] = ratios
                out[f"{kind}_ratio"] = statistics.median(ratios) if ratios else None
        log(f"  enqueue {system}: one-by-one {out['one']:,.0f}/s, bulk {out['bulk'] or 0:,.0f}/s")
        figures.append(out)
    return figures


def paired_turns(turns: list[str], first: str) -> list[str]:
    """``turns`` with ENQUEUE_PAIR's two systems next to each other, ``first`` of them first,
    where the earlier of the two stood."""
    if not all(system in turns for system in ENQUEUE_PAIR):
        return turns
    second = next(system for system in ENQUEUE_PAIR if system != first)
    at = min(turns.index(system) for system in ENQUEUE_PAIR)
    rest = [system for system in turns if system not in ENQUEUE_PAIR]
    return [*rest[:at], first, second, *rest[at:]]


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
        first = _query_count(qdir)
        time.sleep(idle_seconds)
        idle_qps = (_query_count(qdir) - first) / idle_seconds
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
    }
    log(
        f"  pickup {system}: p50 {out['p50_ms']:.0f} ms, p95 {out['p95_ms']:.0f} ms "
        f"({out['picked']}/{out['jobs']}), idle {idle_qps:.1f} queries/s"
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
        database, state = "bench_dbqueue", "queue_state"
    else:
        table, database, state = "job", "bench_raw", "state"
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


# -- the whole run ---------------------------------------------------------------------------


@dataclass
class Plan:
    quick: bool
    runs: int
    systems: tuple[str, ...]
    n_fast: int = 20000  # backlog of the batched drains (ours lease/grouped, raw batch ack)
    n_per_job: int = 3000  # one commit per job: ours atomic, raw claim 100 + ack each
    n_claim1: int = 2000  # raw claim 1 + ack each
    n_peer: int = 2000  # the peers (10-100x slower than the batched drains)
    n_one: int = 1000  # enqueued one by one
    n_bulk: int = 20000  # enqueued in bulk
    trickle: int = 30  # jobs of the pickup-latency trickle
    idle_seconds: float = 4.0  # window in which an idle worker's statements are counted
    levels: str = "0,100000,1000000"  # finished rows of the claim-cost scenario
    claims: int = 30  # rounds of the claim-cost scenario (a claim per level and system each)


def make_plan(args: argparse.Namespace) -> Plan:
    systems = tuple(args.systems.split(",")) if args.systems else ("dbqueue", "raw", *PEERS)
    if args.quick:
        return Plan(
            quick=True,
            runs=1,
            systems=systems,
            n_fast=3000,
            n_per_job=1000,
            n_claim1=500,
            n_peer=500,
            n_one=200,
            n_bulk=3000,
            trickle=10,
            idle_seconds=2.0,
            levels="0,10000,100000",
            claims=5,
        )
    return Plan(quick=False, runs=args.runs, systems=systems)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small N, one run (checks the harness)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--systems", default="", help="comma-separated subset (dbqueue,raw,djqueue,tasksdb,q2)"
    )
    parser.add_argument("--no-write", action="store_true", help="print results, leave BENCHMARKS.md alone")
    parser.add_argument("--skip", default="", help="comma-separated scenarios to skip")
    parser.add_argument(
        "--report-only", action="store_true", help="rewrite BENCHMARKS.md from bench/out/results.json"
    )
    args = parser.parse_args()
    # SIGTERM unwinds like Ctrl-C: the finally blocks stop the worker commands started so far.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    if args.report_only:
        from bench import report

        # Not save(): that would stamp the run's end with the time of this rewrite.
        report.write(json.loads((LOG_DIR / "results.json").read_text()), OUT_MD, OUT_PNG)
        log(f"wrote {OUT_MD.name} and {OUT_PNG.relative_to(ROOT)}")
        return
    plan = make_plan(args)
    skip = set(filter(None, args.skip.split(",")))
    log(f"benchmark ({'quick' if plan.quick else 'full'}, {plan.runs} run(s)); systems {plan.systems}")
    prepare_databases()
    results: dict[str, Any] = {
        "plan": plan.__dict__,
        "machine": machine_info(),
        "began": datetime.now(UTC).isoformat(timespec="seconds"),
        "runs": [],
        "errors": ERRORS,
    }
    write = not args.no_write
    if "contention" not in skip:
        log("contention: drain with concurrent enqueue and purge")
        found = [
            attempt(
                f"contention {system}/{variant}",
                contention,
                system,
                variant,
                drain_n(plan, system, variant),
                drain_n(plan, system, variant) // 4,
                timeout=600,
            )
            for system, variant in (("dbqueue", "lease"), ("dbqueue", "atomic"), ("raw", "batch"))
            if system in plan.systems
        ]
        results["contention"] = [item for item in found if item]

    if "claim" not in skip and "dbqueue" in plan.systems:
        log("claim cost on a wide domain table")
        results["claim_cost"] = attempt(
            "claim cost", ctl, "dbqueue", "claim-cost", "--levels", plan.levels, "--claims", str(plan.claims)
        )
        for level in (results["claim_cost"] or {}).get("levels", []):
            log(
                f"  {level['finished']:>9,} finished rows: {level['ms_per_claim']:.2f} ms/claim, "
                f"{level['reads_per_claim']} handler reads (raw SQL: {level['raw_ms_per_claim']:.2f} ms, "
                f"{level['raw_reads_per_claim']})"
            )
    for run in range(plan.runs):
        log(f"run {run + 1}/{plan.runs}")
        results["runs"].append(one_run(plan, run, skip))
        save(results, write)  # after every run: an interrupted benchmark still leaves its results

    save(results, write, final=True)


def one_run(plan: Plan, run: int, skip: set[str]) -> dict[str, Any]:
    current: dict[str, Any] = {"enqueue": [], "drain": [], "pickup": []}
    order = list(plan.systems)
    random.Random(run).shuffle(order)
    if "enqueue" not in skip:
        current["enqueue"] = enqueue(order, plan.n_one, plan.n_bulk)
    if "drain" not in skip:
        for workers in WORKER_COUNTS:
            for system in order:
                for variant in variants(system):
                    n = drain_n(plan, system, variant)
                    item = attempt(
                        f"drain {system}/{variant} x{workers}", drain, system, variant, workers, n, 600
                    )
                    if item:
                        current["drain"].append(item)
    if "pickup" not in skip:
        for system in order:
            if system != "raw":
                item = attempt(f"pickup {system}", pickup, system, plan.trickle, plan.idle_seconds)
                if item:
                    current["pickup"].append(item)
    return current


def save(results: dict[str, Any], write: bool, final: bool = False) -> None:
    results["ended"] = datetime.now(UTC).isoformat(timespec="seconds")
    results["complete"] = final or results.get("complete", False)
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    (LOG_DIR / "results.json").write_text(json.dumps(results, indent=1, default=str))
    log(f"results in {(LOG_DIR / 'results.json').relative_to(ROOT)}")
    if write:
        from bench import report

        report.write(results, OUT_MD, OUT_PNG)
        log(f"wrote {OUT_MD.name} and {OUT_PNG.relative_to(ROOT)}")


def variants(system: str) -> tuple[str, ...]:
    if system == "dbqueue":
        return tuple(OURS_VARIANTS)
    if system == "raw":
        return tuple(RAW_VARIANTS)
    return ("default",)


def drain_n(plan: Plan, system: str, variant: str) -> int:
    if variant in ("lease", "lease-nohist", "grouped", "batch", "batch500"):
        return plan.n_fast
    if variant in ("atomic", "atomic-nohist", "claim100"):
        return plan.n_per_job
    if variant == "claim1":
        return plan.n_claim1
    return plan.n_peer


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "kernel": platform.release(),
        "cores": os.cpu_count(),
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        mem = Path("/proc/meminfo").read_text().splitlines()[0].split()[1]
        info["ram_gb"] = round(int(mem) / 1024 / 1024, 1)
    except OSError:
        pass
    conn = db()
    cur = conn.cursor()
    cur.execute("SELECT VERSION()")
    info["mariadb"] = cur.fetchone()[0]
    cur.execute(
        "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('innodb_flush_log_at_trx_commit', "
        "'innodb_buffer_pool_size', 'tx_isolation', 'sync_binlog', 'log_bin')"
    )
    info["mariadb_settings"] = dict(cur.fetchall())
    conn.close()
    versions = subprocess.run(
        [PEERS_PY, "-c", VERSIONS], capture_output=True, text=True, check=False
    ).stdout.strip()
    info["peer_versions"] = json.loads(versions or "{}")
    ours = subprocess.run(
        [OURS_PY, "-c", "import django, django_dbqueue; print(django.__version__)"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    info["django_ours"] = ours
    return info


VERSIONS = """
import importlib.metadata as m, json
names = ("Django", "dj-queue", "django-tasks-db", "django-q2", "mysqlclient")
print(json.dumps({p: m.version(p) for p in names}))
"""


if __name__ == "__main__":
    main()
