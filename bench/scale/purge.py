"""Purge 1,000,000 finished messages with ``purgequeue --older-than 30d`` while 4 real
``runqueue`` workers drain a backlog of messages from the same table.

The workers log each claim's two statements with their own time (bench/scale/claimlog.py);
claims before the purge started are the baseline, claims while it ran are compared with them.
Lock conflicts are counted three ways: the workers' and the purge's logs (a deadlock or a lock
wait timeout is logged when retried), the server's counters (MariaDB ``Innodb_deadlocks``,
``Innodb_row_lock_waits``; PostgreSQL ``pg_stat_database.deadlocks``), and, on MariaDB, whether
``SHOW ENGINE INNODB STATUS`` reports a deadlock detected during the run."""

from __future__ import annotations

import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connections

from bench.scale.build import MESSAGES, count, fill_messages
from bench.scale.claimlog import claims

ROOT = Path(__file__).resolve().parents[2]
CONFLICT = re.compile(r"deadlock|lock wait timeout|1205|1213|40P01|55P03", re.IGNORECASE)


def counters() -> dict[str, int]:
    with connections["default"].cursor() as cursor:
        if connections["default"].vendor == "mysql":
            cursor.execute(
                "SHOW GLOBAL STATUS WHERE Variable_name IN ('Innodb_deadlocks', 'Innodb_row_lock_waits')"
            )
            return {name: int(value) for name, value in cursor.fetchall()}
        cursor.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
        return {"deadlocks": int(cursor.fetchone()[0])}


def last_deadlock() -> str:
    """The time of the latest deadlock InnoDB detected ('' if none since the server started)."""
    if connections["default"].vendor != "mysql":
        return ""
    with connections["default"].cursor() as cursor:
        cursor.execute("SHOW ENGINE INNODB STATUS")
        status = cursor.fetchone()[2]
    found = re.search(r"LATEST DETECTED DEADLOCK\n-+\n(\S+ \S+)", status)
    return found.group(1) if found else ""


def percentiles(times: list[float]) -> dict[str, float]:
    ordered = sorted(t * 1000 for t in times)
    if not ordered:
        return {"n": 0, "p50": 0.0, "p95": 0.0, "max": 0.0}
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return {"n": len(ordered), "p50": statistics.median(ordered), "p95": p95, "max": ordered[-1]}


def command(*args: str, log: Path, env: dict[str, str]) -> subprocess.Popen:
    argv = [sys.executable, "-m", "django", *args, "--settings", "bench.scale.settings"]
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)


def run(purgeable: int, backlog: int, baseline: float, workers: int = 4) -> dict[str, Any]:
    """Fill ``purgeable`` finished and ``backlog`` ready messages, start the workers, measure
    ``baseline`` seconds of claims, then purge while they drain; stop them when the purge ends."""
    fill_messages(purgeable, backlog)
    logs = Path(tempfile.mkdtemp(prefix="scale_purge_"))
    env = {**os.environ, "SCALE_DB": settings.DATABASES["default"]["NAME"], "PYTHONPATH": str(ROOT)}
    env.pop("SCALE_QUIET", None)  # the workers' and the purge's warnings are counted
    before, deadlock_before = counters(), last_deadlock()
    procs = [
        command(
            "runqueue",
            "django_dbqueue.Message",
            "--batch-size",
            "100",
            "--worker-id",
            f"scale-{i}",
            log=logs / f"worker{i}.out",
            env={**env, "SCALE_CLAIM_LOG": str(logs / f"claims{i}.log")},
        )
        for i in range(workers)
    ]
    # Start-up (Django, the first claim) takes seconds on a loaded machine: the baseline window
    # opens once every worker has claimed.
    deadline = time.time() + 120
    while time.time() < deadline and not all(
        (logs / f"claims{i}.log").exists() and (logs / f"claims{i}.log").stat().st_size
        for i in range(workers)
    ):
        time.sleep(0.5)
    baseline_started = time.time()
    time.sleep(baseline)
    purge_started = time.time()
    purge = command(
        "purgequeue", "django_dbqueue.Message", "--older-than", "30d", log=logs / "purge.out", env=env
    )
    while purge.poll() is None:
        time.sleep(5)
        print(f"  purging: {count('default', MESSAGES):,} messages in the table", flush=True)
    purge_ended = time.time()
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        proc.wait(timeout=120)
    after, deadlock_after = counters(), last_deadlock()
    found = [c for i in range(workers) for c in claims(logs / f"claims{i}.log")]
    base = percentiles([t for at, t in found if baseline_started <= at < purge_started])
    during = percentiles([t for at, t in found if purge_started <= at <= purge_ended])
    texts = [p.read_text() for p in logs.glob("*.out")]
    conflicts = sum(len(CONFLICT.findall(text)) for text in texts)
    with connections["default"].cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM {MESSAGES} WHERE queue_state = 'ready'")
        left = cursor.fetchone()[0]
    result = {
        "purged": purgeable + backlog - count("default", MESSAGES),
        "purge_s": purge_ended - purge_started,
        "purge_rc": purge.returncode,
        "purge_out": (logs / "purge.out").read_text().strip(),
        "before": base,
        "during": during,
        "backlog_left": left,
        "log_conflicts": conflicts,
        "server": {k: after[k] - before.get(k, 0) for k in after},
        "innodb_new_deadlock": deadlock_after if deadlock_after != deadlock_before else "",
        "logs": str(logs),
    }
    print(f"  purge: {result}", flush=True)
    return result
