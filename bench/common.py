"""What every part of the benchmark driver shares: paths, the systems and their variants,
logging, running a system's control command, and the server's status counters."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import ledger  # noqa: E402

UTC = timezone.utc  # datetime.UTC is Python 3.11+

OURS_PY = os.environ.get("BENCH_OURS_PYTHON", str(ROOT / ".venv" / "bin" / "python"))
PEERS_PY = os.environ.get("BENCH_PEERS_PYTHON", sys.executable)
MANAGE = str(ROOT / "bench" / "manage.py")
RAW = str(ROOT / "bench" / "raw.py")
OUT_MD = ROOT / "BENCHMARKS.md"
OUT_PNG = ROOT / "bench" / "benchmarks.png"
LOG_DIR = ROOT / "bench" / "out"

WORKER_COUNTS = (1, 2, 4)
PEERS = ("djqueue", "tasksdb", "q2")
OURS_VARIANTS = {
    "lease": ("dbqapp.NoopJob", "django_dbqueue, lease mode (batched outcomes)"),
    "lease-nohist": ("dbqapp.NoopJob", "django_dbqueue, lease mode, attempt history off"),
    "atomic": ("dbqapp.AtomicJob", "django_dbqueue, atomic mode (1 job per transaction)"),
    "atomic-nohist": ("dbqapp.AtomicJob", "django_dbqueue, atomic mode, attempt history off"),
    "grouped": ("dbqapp.GroupedJob", "django_dbqueue, atomic mode, 100 jobs per transaction"),
    "grouped-optimistic": (
        "dbqapp.OptimisticGroupedJob",
        "django_dbqueue, atomic mode, 100 jobs per transaction, optimistic (no savepoints)",
    ),
    "workflow": ("dbqapp.WorkflowJob", "django_dbqueue, a 1-step workflow in atomic mode"),
}
#: The raw-SQL loops of bench/raw.py the floors are measured against (its ``atomic`` mode, the
#: statements the previous core sent as one block, is studied by bench/atomic_ceiling.py).
RAW_VARIANTS = {
    "claim1": "raw SQL, claim 1 (SKIP LOCKED), ack each",
    "claim100": "raw SQL, claim 100, ack each",
    "batch": "raw SQL, claim 100, one ack UPDATE per batch",
    "batch500": "raw SQL, claim 500, one ack UPDATE per batch",
}
#: Seconds between polls of an idle peer worker.
PEER_POLL = 0.1

ERRORS: list[str] = []


def log(message: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {message}", flush=True)


def attempt(what: str, function: Any, *args: Any, **kwargs: Any) -> Any:
    """Run one scenario; a failure is logged and reported, and the run goes on."""
    try:
        return function(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - one broken scenario must not lose the others
        message = f"{what}: {type(exc).__name__}: {str(exc).strip()[-600:]}"
        log("  ERROR " + message)
        ERRORS.append(message)
        return None


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


def prepare_databases(systems: tuple[str, ...] = ("dbqueue", "raw", *PEERS)) -> None:
    """The databases of ``systems`` and the ledger, migrated and empty (the peers' only when
    they run: the quick run has no peers' virtualenv)."""
    conn = db(None)
    cur = conn.cursor()
    django_systems = [system for system in ("dbqueue", *PEERS) if system in systems]
    for system in django_systems:
        name = f"{ledger.PREFIX}_{system}"
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {name} CHARACTER SET utf8mb4")
    conn.close()
    ledger.reset()
    ctl("raw", "setup")
    for system in django_systems:
        subprocess.run([python_for(system), MANAGE, "migrate", "-v0"], env=system_env(system), check=True)


def load_average() -> list[float]:
    """The machine's 1, 5 and 15 minute load averages (the machine is shared)."""
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return []


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "kernel": os.uname().release,
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
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    changed = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--", "django_dbqueue"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    info["commit"] = (commit + ("+uncommitted changes to django_dbqueue/" if changed else "")) or None
    return info


VERSIONS = """
import importlib.metadata as m, json
names = ("Django", "dj-queue", "django-tasks-db", "django-q2", "mysqlclient")
print(json.dumps({p: m.version(p) for p in names}))
"""
