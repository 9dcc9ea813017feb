"""Durable workflows waking up: lateness after the due time or the event, wakes per row, and
what parked rows cost an idle worker.

    DATABASE_URL=mysql://root@127.0.0.1:3306/bench_wf python bench/workflow_wake.py [--rows 10000 --sleep 30]
    make bench-workflows      (MariaDB and PostgreSQL; WAKE_ARGS="--rows 500 --sleep 5" for a quick one)

Issue #36: "10,000 rows sleeping 30 s and 10,000 waiting for events that arrive from another
process: each wakes once, p95 lateness after the due time or the event under 1 s with the
default poll; idle statements per second no higher than an empty queue's."

The rows are ``testapp.WorkflowWake`` (atomic mode): a run adds one to the row's ``runs``,
then sleeps ``--sleep`` seconds (sleepers) or waits for the event "go" (waiters), then runs
the step "woke" and ends. So a row that woke once ran twice; ``runs`` says how often it ran.

1. ``--rows`` waiters and ``--rows`` sleepers of an hour are parked by a ``runqueue`` of
   ``--workers`` processes with the package's defaults (poll interval included): the workers'
   capacity, in runs a second.
2. Idle: one ``runqueue`` process (default poll) has its statements counted for
   ``--idle-seconds`` with those rows parked (and again, at the end, with the queue empty).
   Counted in the worker process: every statement through Django's cursor
   (``bench/querycount.py``), and on MariaDB also every round trip at the driver, with
   ``COMMIT`` and ``SET autocommit`` (``bench/stmtcount.py``).
3. The sleepers of an hour are deleted. Another process sends the waiters their events, each
   in a transaction of its own with the database's time in its data, while ``--rows``
   sleepers of ``--sleep`` s are inserted, each at ``--rate`` a second (by default a sixth of
   the capacity: a sleeper's park, its wake and an event are three runs, so the workers are
   half busy and the lateness is the wake-up's, not a backlog's; at a quarter, the first full
   run here fell behind the feed by 25 s). A sleeper's clock starts at its first run.
4. When every row ended, the lateness of each wake: the "woke" step's start (its checkpoint's
   ``started_at``, the database's clock as the run knew it) minus the sleep's end (the sleep
   checkpoint's ``wake_at``) or the event's send (the time in its data, read in the sender's
   transaction before its INSERT, so the commit's milliseconds count as lateness).

Runs in a throw-away test database (``test_<name>`` of DATABASE_URL).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DATABASE_URL", "mysql://root@127.0.0.1:3306/bench_wf")
os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"

import django  # noqa: E402

django.setup()

from django.db import connection, connections, transaction  # noqa: E402

from bench import stmtcount  # noqa: E402
from django_dbqueue.backends import read_now  # noqa: E402
from django_dbqueue.models import WorkflowEvent, WorkflowStep  # noqa: E402
from django_dbqueue.workflows import send_event  # noqa: E402
from tests.testapp.models import WorkflowWake  # noqa: E402

LABEL = "testapp.WorkflowWake"


# -- processes ------------------------------------------------------------------------------------


def runqueue(env: dict[str, str], workers: int, settings: str = "tests.settings") -> subprocess.Popen:
    """``runqueue testapp.WorkflowWake`` with the package's defaults (poll interval included)."""
    command = [sys.executable, "-m", "django", "runqueue", LABEL, "--settings", settings]
    return subprocess.Popen(
        [*command, "--concurrency", str(workers)], cwd=ROOT, env=env, start_new_session=True
    )


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_for(what: str, done: Any, timeout: float) -> float:
    """Seconds until ``done()``; an error after ``timeout``."""
    started = time.monotonic()
    while not done():
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"{what}: not done after {timeout:.0f} s")
        time.sleep(0.25)
    return time.monotonic() - started


def sender(pks: list[int], rate: float) -> None:
    """Another process: the event "go" to each waiter, ``rate`` a second, each in its own
    transaction carrying the database's time of its send."""
    connections.close_all()
    started = time.monotonic()
    for index, pk in enumerate(pks):
        pause = started + index / rate - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        with transaction.atomic():
            sent_at = read_now("default")
            send_event(WorkflowWake(pk=pk), "go", {"sent_at": sent_at.isoformat()})
    connections.close_all()


# -- phases ------------------------------------------------------------------------------------------


def parked(count: int) -> Any:
    """``count`` rows ran once and are READY again (parked), none running."""

    def done() -> bool:
        rows = WorkflowWake.objects.filter(runs__gte=1, queue_state="ready")
        return rows.count() >= count and not WorkflowWake.objects.filter(queue_state="running").exists()

    return done


def insert(rows: int, nap: float) -> None:
    WorkflowWake.objects.bulk_create([WorkflowWake(nap=nap) for _ in range(rows)], batch_size=2000)


def feed_sleepers(rows: int, nap: float, rate: float) -> None:
    """Insert ``rows`` sleepers, ``rate`` a second (a batch every 0.1 s): each one's clock
    starts at its first run, so they come due at that rate too."""
    started, inserted = time.monotonic(), 0
    while inserted < rows:
        due = min(rows, int((time.monotonic() - started) * rate) + 1)
        if due > inserted:
            insert(due - inserted, nap)
            inserted = due
        time.sleep(0.1)


def park_phase(args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    """``--rows`` waiters (their event comes later) and ``--rows`` sleepers of an hour, parked
    by the workers at full speed: the workers' capacity in runs a second, and the parked rows
    of the idle count."""
    insert(args.rows, 0)
    insert(args.rows, 3600)
    worker = runqueue(env, args.workers)
    try:
        park_s = wait_for("parking", parked(2 * args.rows), timeout=args.timeout)
    finally:
        stop(worker)
    return {"parked in s": round(park_s, 1), "capacity runs/s": round(2 * args.rows / park_s, 1)}


def wake_phase(args: argparse.Namespace, env: dict[str, str], capacity: float) -> dict[str, Any]:
    """The sleepers of an hour gone, the waiters' events sent from another process and
    ``--rows`` sleepers of ``--sleep`` s fed, side by side, each at ``--rate`` (by default a
    sixth of the capacity: parks, sleep ends and events together keep the workers half busy,
    so the lateness is the wake-up's, not a backlog's)."""
    hour = WorkflowWake.objects.filter(nap=3600)
    WorkflowStep.objects.filter(
        model=LABEL, object_pk__in=[str(pk) for pk in hour.values_list("pk", flat=True)]
    ).delete()
    hour.delete()
    rate = args.rate or capacity / 6
    waiters = list(WorkflowWake.objects.order_by("pk").values_list("pk", flat=True))
    connections.close_all()
    worker = runqueue(env, args.workers)
    try:
        time.sleep(3)  # the workers start
        started = time.monotonic()
        proc = multiprocessing.get_context("fork").Process(target=sender, args=(waiters, rate))
        proc.start()
        feed_sleepers(args.rows, args.sleep, rate)
        fed = time.monotonic()
        ended = lambda: not WorkflowWake.objects.exclude(queue_state="succeeded").exists()  # noqa: E731
        wait_for("waking", ended, timeout=args.timeout + args.sleep)
        done = time.monotonic()
        proc.join(timeout=60)
    finally:
        stop(worker)
    return {
        "rate/s": round(rate, 1),
        "fed, woken and ended in s": round(done - started, 1),
        # Past the last sleeper's sleep: how far the workers were behind the feed at its end.
        "ended after the last feed + sleep, s": round(done - fed - args.sleep, 1),
        **lateness(args.rows),
    }


def lateness(rows: int) -> dict[str, Any]:
    """Each wake's lateness (s) by kind, and how often each row ran."""
    marks: dict[int, dict[str, Any]] = {}
    for pk, name, wake_at, started_at, result in WorkflowStep.objects.filter(model=LABEL).values_list(
        "object_pk", "name", "wake_at", "started_at", "result"
    ):
        mark = marks.setdefault(int(pk), {})
        if name == "woke":
            mark["woke"] = started_at
        elif name.startswith("sleep"):
            mark["due"] = wake_at
        elif name.startswith("wait"):
            mark["due"] = datetime.fromisoformat(result["sent_at"])
    naps = dict(WorkflowWake.objects.values_list("pk", "nap"))
    late: dict[str, list[float]] = {"sleep": [], "event": []}
    for pk, mark in marks.items():
        if "woke" in mark and "due" in mark:
            late["sleep" if naps[pk] else "event"].append((mark["woke"] - mark["due"]).total_seconds())
    runs = Counter(WorkflowWake.objects.values_list("runs", flat=True))
    states = Counter(WorkflowWake.objects.values_list("queue_state", flat=True))
    return {
        "rows": 2 * rows,
        "runs per row": {str(k): v for k, v in sorted(runs.items())},
        "states": dict(states),
        "sleep": summary(late["sleep"]),
        "event": summary(late["event"]),
    }


def summary(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"woke": 0}
    ordered = sorted(values)
    return {
        "woke": len(ordered),
        "p50_s": round(statistics.median(ordered), 3),
        "p95_s": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 3),
        "max_s": round(ordered[-1], 3),
        "min_s": round(ordered[0], 3),
    }


def idle_count(args: argparse.Namespace, env: dict[str, str], label: str) -> dict[str, Any]:
    counted = count_idle(args, env)
    rows = WorkflowWake.objects.filter(queue_state="ready", runs=1).count()
    return {"queue": label, "parked rows": rows, **counted, **probe_cost()}


def probe_cost(probes: int = 30) -> dict[str, float]:
    """What one idle poll costs the server: the idle worker's probe (``has_ready()``, "is any
    row due?") timed here, and on MariaDB the index entries it read (the session's
    ``Handler_read_%`` counters around one probe). Statements a second say how often an idle
    worker asks; this says what each question costs, which parked rows could change."""
    queue = WorkflowWake.objects.all()
    times = []
    for _ in range(probes):
        started = time.perf_counter()
        queue.has_ready()
        times.append((time.perf_counter() - started) * 1000)
    out = {"probe ms (median)": round(statistics.median(times), 2)}
    if connection.vendor == "mysql":
        before = handler_reads()
        queue.has_ready()
        out["index entries read a probe"] = handler_reads() - before
    return out


def handler_reads() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SHOW SESSION STATUS LIKE 'Handler_read%%'")
        return sum(int(value) for _, value in cursor.fetchall())


def clear() -> None:
    WorkflowWake.objects.all().delete()
    WorkflowStep.objects.filter(model=LABEL).delete()
    WorkflowEvent.objects.filter(model=LABEL).delete()


def count_idle(args: argparse.Namespace, env: dict[str, str]) -> dict[str, float]:
    """One idle runqueue process; its statements over ``--idle-seconds`` after a settling wait."""
    with tempfile.TemporaryDirectory(prefix="wake-idle-") as folder:
        queries, driver = Path(folder, "queries"), Path(folder, "driver")
        queries.mkdir()
        driver.mkdir()
        counting = {**env, "BENCH_COUNT_QUERIES": str(queries), "BENCH_COUNT_STATEMENTS": str(driver)}
        worker = runqueue(counting, 1, settings="bench.workflow_wake_settings")
        try:
            time.sleep(args.settle)  # started, its first claims and checks done
            first = (query_total(queries), stmtcount.total(driver))
            time.sleep(args.idle_seconds)
            last = (query_total(queries), stmtcount.total(driver))
        finally:
            stop(worker)
    out = {"cursor statements/s": round((last[0] - first[0]) / args.idle_seconds, 2)}
    if connection.vendor == "mysql":
        out["driver statements/s (with COMMIT)"] = round((last[1] - first[1]) / args.idle_seconds, 2)
    return out


def query_total(folder: Path) -> int:
    """The cursor statements counted so far by bench/querycount.py's files (one per pid)."""
    total = 0
    for entry in folder.iterdir():
        if entry.suffix != ".tmp":
            try:
                total += int(entry.read_text() or 0)
            except (OSError, ValueError):
                pass
    return total


# -- report ---------------------------------------------------------------------------------------------


def report(args: argparse.Namespace, results: dict[str, Any]) -> list[str]:
    """The tables, and what misses the issue's bars."""
    park, wake, idle = results["park"], results["wake"], results["idle"]
    print(
        f"\nWorkflow wake-ups ({results['server']}), {args.workers} worker processes, default poll: "
        f"{2 * args.rows} rows parked in {park['parked in s']} s ({park['capacity runs/s']} runs/s)"
    )
    if wake is not None:
        print(
            f"then {args.rows} sleepers of {args.sleep:g} s fed and {args.rows} parked waiters' events "
            f"sent from another process, each {wake['rate/s']}/s; all woken and ended in "
            f"{wake['fed, woken and ended in s']} s, {wake['ended after the last feed + sleep, s']} s "
            "after the last sleeper's sleep\n"
        )
        print("| kind | woke | runs per row (all rows) | lateness p50 s | p95 s | max s |")
        print("|---|---:|---|---:|---:|---:|")
        for kind in ("sleep", "event"):
            s = wake[kind]
            runs = wake["runs per row"]
            print(
                f"| {kind} | {s['woke']} | {runs} | {s.get('p50_s')} | {s.get('p95_s')} | {s.get('max_s')} |"
            )
    print(f"\nIdle runqueue (1 process, default poll), {args.idle_seconds:g} s counted:\n")
    keys = [key for key in idle[0] if key != "queue"]
    print("| queue | " + " | ".join(keys) + " |")
    print("|---|" + "---:|" * len(keys))
    for row in idle:
        print(f"| {row['queue']} | " + " | ".join(str(row[key]) for key in keys) + " |")
    return verdict(args, results)


def verdict(args: argparse.Namespace, results: dict[str, Any]) -> list[str]:
    wake, (parked_idle, empty_idle) = results["wake"] or {}, results["idle"]
    found = wake_verdict(args, wake) if wake else []
    if parked_idle["parked rows"] != 2 * args.rows:
        found.append(f"the idle count saw {parked_idle['parked rows']} parked rows, not {2 * args.rows}")
    for key, rate in parked_idle.items():
        if key.endswith("/s") and rate > empty_idle[key] * 1.1 + 0.5:
            found.append(f"idle {key}: {rate} with parked rows, {empty_idle[key]} empty")
    return found


def wake_verdict(args: argparse.Namespace, wake: dict[str, Any]) -> list[str]:
    found = []
    if wake["runs per row"] != {"2": 2 * args.rows}:
        found.append(f"not every row ran exactly twice (woke once): {wake['runs per row']}")
    for kind in ("sleep", "event"):
        if wake[kind]["woke"] != args.rows:
            found.append(f"{args.rows - wake[kind]['woke']} {kind} rows never woke")
        elif wake[kind]["p95_s"] >= 1.0:
            found.append(f"{kind}: p95 lateness {wake[kind]['p95_s']} s, not under 1 s")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000, help="sleepers, and as many waiters (10,000)")
    parser.add_argument("--sleep", type=float, default=30.0, help="the sleepers' sleep, s (30)")
    parser.add_argument(
        "--rate", type=float, default=0, help="sleepers fed and events sent a second (default: capacity / 6)"
    )
    parser.add_argument("--workers", type=int, default=2, help="runqueue worker processes (2)")
    parser.add_argument("--idle-seconds", type=float, default=30.0, help="idle window counted, s (30)")
    parser.add_argument("--settle", type=float, default=5.0, help="wait before counting, s (5)")
    parser.add_argument("--timeout", type=float, default=600.0, help="longest wait of a phase, s")
    parser.add_argument(
        "--idle-only", action="store_true", help="park the rows and count the idle worker only"
    )
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    creation = connection.creation
    name = creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    env = {**os.environ, "DBQUEUE_TEST_DB_NAME": name, "DBQUEUE_LOG_LEVEL": "WARNING"}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT VERSION()")
            server = cursor.fetchone()[0].split(" on ")[0]
        park = park_phase(args, env)
        idle = [idle_count(args, env, "parked rows")]
        wake = None if args.idle_only else wake_phase(args, env, park["capacity runs/s"])
        clear()
        idle.append(idle_count(args, env, "empty"))
        results = {"server": server, "park": park, "wake": wake, "idle": idle}
    finally:
        connections.close_all()
        creation.destroy_test_db(name, verbosity=0)
    results["args"] = vars(args)
    found = report(args, results)
    results["problems"] = found
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))
    print("\nPASS: each row woke once, p95 under 1 s, idle cost as an empty queue's" if not found else "")
    if found:
        print("FAIL: " + "; ".join(found))
        sys.exit(1)


if __name__ == "__main__":
    main()
