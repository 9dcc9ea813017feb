"""The chaos run: real ``runqueue`` supervisors over a mixed workload on a private MariaDB,
while faults are injected; then the counters that DESIGN.md's invariants promise.

Run it with ``python -m tests.chaos --quick`` (about a minute) or ``make chaos`` (the long
variant). The pytest test ``tests/chaos/test_chaos_quick.py`` runs the quick one and fails on
any counter that is wrong. Faults injected (each counted in the results):

* SIGKILL of random worker processes (their supervisor replaces them);
* SIGKILL of a whole ``runqueue`` (supervisor and workers), started again by the suite;
* SIGTERM of a ``runqueue`` during batches (the graceful path), started again;
* a MariaDB restart: clean (SIGTERM) and, on the second one, a crash (SIGKILL), with the
  workers left to reconnect by themselves;
* ``KILL CONNECTION`` of workers' sessions, picked from ``information_schema.processlist``;
* lock waits and deadlocks: two publishers inserting, an operator thread running bulk
  ``reprioritize()`` / ``retry_now()``, and a purge deleting finished rows in batches, all on
  the queue tables the workers claim from;
* ``runqueue`` processes whose wall clock is hours off (``tests/chaos/skew.py``).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django_dbqueue.compat import UTC

from .mariadb import WORKER_USER, PrivateMariaDB
from .skew import parse as parse_offset

ROOT = Path(__file__).resolve().parents[2]


def run_to_json(args: list[str], out: Path, timeout: float) -> tuple[subprocess.CompletedProcess[str], Any]:
    """``python -m <args> --json out`` from the repo's root, with the settings the run picks
    itself; its results JSON, or an assertion error with the run's output when it wrote none."""
    proc = subprocess.run(
        [sys.executable, "-m", *args, "--json", str(out)],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-6000:]
    return proc, json.loads(out.read_text())


def migrate_private_database(admin_url: str, worker_url: str) -> dict[str, str]:
    """Point this process's Django at the private server (``admin_url``), migrate it, and return
    the environment of the worker processes, which connect as ``worker_url``'s account."""
    os.environ["CHAOS_DATABASE_URL"] = admin_url
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.chaos.settings"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DBQUEUE_TEST_DB", "DATABASE_URL"))}
    env["CHAOS_DATABASE_URL"] = worker_url
    env["PYTHONPATH"] = str(ROOT)
    return env


POISON = 99  # fail_times of a row that fails every attempt
MODELS = (
    "testapp.ChaosLeaseJob",
    "testapp.ChaosAtomicJob",
    "testapp.ChaosAtomicSingleJob",
    "testapp.ChaosAtomicOptimisticJob",
)


def table_labels(model: type) -> list[str]:
    """The labels of every model on ``model``'s table (it and its proxies): the attempt
    history records the one that ran the row."""
    from django.apps import apps

    return [m._meta.label for m in apps.get_models() if m._meta.concrete_model is model]


@dataclass
class Config:
    rows: int = 2_000
    seed_fraction: float = 0.2  # inserted before the workers start; the rest is published live
    supervisors: int = 4
    concurrency: int = 1
    batch_size: int = 20
    lease: float = 2.0
    duration: float = 24.0  # seconds of chaos (publishing spans it)
    worker_kills: int = 6
    supervisor_kills: int = 1
    sigterms: int = 1
    restarts: int = 1
    restart_downtime: float = 2.0
    connection_kills: int = 2
    freezes: int = 1  # SIGSTOP a worker past its lease, then SIGCONT: its late outcomes are rejected
    skews: tuple[str, ...] = ("-5h",)  # clock offsets of the first supervisors
    settle_timeout: float = 120.0
    seed: int = 4
    workdir: str | None = None  # None: a private temporary folder per run (see private_workdir)
    keep_data: bool = False


QUICK = Config()
LONG = Config(
    rows=50_000,
    supervisors=4,
    concurrency=2,
    batch_size=50,
    duration=300.0,
    worker_kills=30,
    supervisor_kills=4,
    sigterms=4,
    restarts=2,
    restart_downtime=3.0,
    connection_kills=8,
    freezes=4,
    skews=("-5h", "+3h"),
    settle_timeout=300.0,
)


# -- the processes -----------------------------------------------------------------------------


class Runqueue:
    """One incarnation of ``manage.py runqueue`` (a supervisor and its workers). It reads
    ``models``, ``settings_module``, ``config``, ``logdir`` and ``worker_env`` of its harness."""

    def __init__(self, harness: Harness, index: int, generation: int) -> None:
        self.index = index
        self.generation = generation
        self.skew = harness.config.skews[index] if index < len(harness.config.skews) else None
        prefix = f"skew{self.skew.replace('+', 'p').replace('-', 'm')}-" if self.skew else ""
        self.name = f"{prefix}s{index}g{generation}"
        self.log_path = harness.logdir / f"{self.name}.log"
        env = dict(harness.worker_env)
        if self.skew:
            env.update(harness.skew_env(self.skew))
        cfg = harness.config
        self.started = time.monotonic()
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "django",
                "runqueue",
                *harness.models,
                "--settings",
                harness.settings_module,
                "--concurrency",
                str(cfg.concurrency),
                "--batch-size",
                str(cfg.batch_size),
                "--lease",
                str(cfg.lease),
                "--poll-interval",
                "0.2",
                "--worker-id",
                self.name,
            ],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def workers(self) -> list[int]:
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]

    def kill_all(self) -> list[int]:
        pids = [*self.workers(), self.proc.pid]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        self.log.close()
        return pids

    def terminate(self, timeout: float = 90) -> int:
        # A process still importing Django has no handler yet and would die of the signal:
        # the graceful path starts once runqueue is up.
        time.sleep(max(0.0, 3.0 - (time.monotonic() - self.started)))
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill_all()
            return -999
        self.log.close()
        return code


# -- the harness ------------------------------------------------------------------------------


@dataclass
class Fault:
    kind: str
    started: datetime  # database time
    ended: datetime
    detail: str = ""


@dataclass
class Tally:
    events: Counter = field(default_factory=Counter)
    killed_pids: set[int] = field(default_factory=set)
    frozen_pids: set[int] = field(default_factory=set)
    faults: list[Fault] = field(default_factory=list)
    recoveries: list[dict[str, Any]] = field(default_factory=list)
    sigterm_exit_codes: list[int] = field(default_factory=list)


def private_workdir(workdir: str | None) -> Path:
    """The run's folder (its MariaDB server, logs, results.json): by default a new private one
    from ``tempfile.mkdtemp``, so two runs on one machine never share or wipe each other's. A
    folder given with ``--workdir`` must be new or empty: it is never wiped."""
    if workdir is None:
        base = Path(tempfile.mkdtemp(prefix="dbqueue-chaos-"))
        base.chmod(0o711)  # run as root, mariadbd runs as 'mysql' and must reach its own subfolder
        return base
    base = Path(workdir)
    if base.exists() and any(base.iterdir()):
        raise RuntimeError(f"--workdir {base} is not empty: give a new folder, or none for a private one")
    base.mkdir(parents=True, exist_ok=True)
    return base


class Harness:
    #: What its runqueues consume and with which settings (the soak, tests/soak, reuses
    #: ``Runqueue`` with its own).
    models: tuple[str, ...] = MODELS
    settings_module = "tests.chaos.settings"

    def __init__(self, config: Config) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.base = private_workdir(config.workdir)
        self.logdir = self.base / "logs"
        self.db = PrivateMariaDB(self.base / "mariadb")
        self.tally = Tally()
        self.runqueues: list[Runqueue] = []
        self.generations: list[int] = []
        self.stop_threads = threading.Event()
        self.publishing_done = threading.Event()
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.worker_env: dict[str, str] = {}
        self.started = 0.0
        self.disconnected_pids: set[int] = set()
        self.errored_pids: set[int] = set()

    # -- set-up ----------------------------------------------------------------------------

    def setup(self) -> None:
        self.logdir.mkdir(parents=True)
        self.db.create()
        self.worker_env = migrate_private_database(self.db.url("root"), self.db.url(WORKER_USER))

    def skew_env(self, offset: str) -> dict[str, str]:
        return {"CHAOS_CLOCK_OFFSET": offset}

    def skew_check(self, offset: str) -> float:
        """How far off the clock of a process started like the skewed runqueues is (s)."""
        code = (
            "import django, datetime; django.setup(); from django.utils import timezone; "
            "print((timezone.now() - datetime.datetime.now(datetime.timezone.utc)).total_seconds())"
        )
        env = {**self.worker_env, **self.skew_env(offset), "DJANGO_SETTINGS_MODULE": "tests.chaos.settings"}
        out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True)
        return round(float(out.stdout.strip() or "nan"))

    # -- rows ------------------------------------------------------------------------------

    def make_rows(self, model: type, count: int, batch: int) -> list:
        cfg, rng, rows = self.config, self.rng, []
        for _ in range(count):
            r = rng.random()
            if r < 0.001:
                sleep = cfg.lease * 1.6  # longer than its lease: renewals must keep it
            elif r < 0.015:
                sleep = 0.2
            elif r < 0.12:
                sleep = rng.uniform(0.005, 0.025)
            else:
                sleep = 0.0
            f = rng.random()
            fail_times = POISON if f < 0.01 else 2 if f < 0.04 else 1 if f < 0.15 else 0
            rows.append(
                model(batch=batch, sleep=sleep, fail_times=fail_times, queue_priority=rng.randint(-5, 5))
            )
        return rows

    def insert_batch(self, model: type, number: int, rows: list) -> None:
        """Insert a batch and its ChaosBatch marker in one transaction; after a database
        error, look whether it committed before trying again (never twice, never lost)."""
        from django.db import transaction

        from tests.testapp.models import ChaosBatch

        while True:
            try:
                with transaction.atomic():
                    ChaosBatch.objects.create(model=model._meta.label, number=number, size=len(rows))
                    model.objects.bulk_create(rows)
                return
            except Exception as exc:  # noqa: BLE001 - classify, reconnect, check, retry
                self.db_error("publish", exc)
                for row in rows:
                    row.pk = None
                    row._state.adding = True
            while True:
                try:
                    if ChaosBatch.objects.filter(model=model._meta.label, number=number).exists():
                        return
                    break
                except Exception as exc:  # noqa: BLE001
                    self.db_error("publish-check", exc)

    def db_error(self, where: str, exc: Exception) -> None:
        from django.db import connection

        code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
        kind = {1213: "deadlock", 1205: "lock wait timeout"}.get(code, "connection")
        with self.lock:
            self.tally.events[f"{where}: {kind}"] += 1
        if kind == "connection":
            try:
                connection.close()
            except Exception:  # noqa: BLE001 - the connection is broken anyway
                pass
            time.sleep(0.3)
        else:
            time.sleep(self.rng.uniform(0, 0.05))

    # -- background load -------------------------------------------------------------------

    def publisher(self, model: type, numbers: list[int], sizes: dict[int, int], pace: float) -> None:
        from django.db import connection

        try:
            for number in numbers:
                if self.stop_threads.is_set():
                    break
                self.insert_batch(model, number, self.make_rows(model, sizes[number], number))
                with self.lock:
                    self.tally.events["batches published"] += 1
                time.sleep(pace)
        finally:
            connection.close()

    def operator(self) -> None:
        """Bulk admin actions on the tables the workers claim from."""
        from django.db import connection

        from tests.testapp.models import ChaosAtomicJob, ChaosLeaseJob

        rng = random.Random(self.config.seed + 1)
        while not self.stop_threads.wait(rng.uniform(0.2, 0.6)):
            model = rng.choice((ChaosLeaseJob, ChaosAtomicJob))
            first = rng.randint(0, max(self.batches // 2 - 1, 0))
            batches = list(range(first, first + 4))
            try:
                action = rng.random()
                if action < 0.45:
                    n = model.objects.filter(batch__in=batches).reprioritize(rng.randint(-5, 10))
                    name = "reprioritize"
                elif action < 0.75:
                    n = model.objects.filter(queue_state="ready", batch__in=batches).retry_now()
                    name = "retry_now"
                else:
                    n = model.objects.filter(queue_state="ready", queue_priority__lt=0).reprioritize(0)
                    name = "reprioritize (by priority)"
                with self.lock:
                    self.tally.events[f"admin {name}"] += 1
                    self.tally.events["admin rows updated"] += n
            except Exception as exc:  # noqa: BLE001
                self.db_error("admin", exc)
        connection.close()

    def purger(self) -> None:
        """Delete finished rows in batches by primary key, keeping a record of each."""
        from django.db import connection, transaction

        from tests.testapp.models import ChaosArchive, ChaosAtomicJob, ChaosLeaseJob

        while not self.stop_threads.wait(0.4):
            for model in (ChaosLeaseJob, ChaosAtomicJob):
                try:
                    with transaction.atomic():
                        finished = list(
                            model.objects.filter(queue_state__in=("succeeded", "failed"))
                            .order_by("pk")
                            .select_for_update(skip_locked=True)
                            .values_list(
                                "pk", "queue_state", "queue_attempts", "fail_times", "queue_last_error"
                            )[:200]
                        )
                        if not finished:
                            continue
                        ChaosArchive.objects.bulk_create(
                            ChaosArchive(
                                kind=model.chaos_kind,
                                job_id=pk,
                                state=state,
                                attempts=attempts,
                                fail_times=fail_times,
                                last_error=error[:2000],
                            )
                            for pk, state, attempts, fail_times, error in finished
                        )
                        deleted, _ = model.objects.filter(pk__in=[f[0] for f in finished]).delete()
                    with self.lock:
                        self.tally.events["purge batches"] += 1
                        self.tally.events["purged rows"] += deleted
                except Exception as exc:  # noqa: BLE001
                    self.db_error("purge", exc)
        connection.close()

    # -- faults ----------------------------------------------------------------------------

    def db_now(self) -> datetime:
        from django.db import connection

        for _ in range(100):
            try:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT UTC_TIMESTAMP(6)")
                    return cursor.fetchone()[0].replace(tzinfo=UTC)
            except Exception as exc:  # noqa: BLE001
                self.db_error("clock", exc)
        raise RuntimeError("the database does not answer")

    def start_runqueue(self, index: int) -> None:
        self.generations[index] += 1
        self.runqueues[index] = Runqueue(self, index, self.generations[index])

    def live(self) -> list[Runqueue]:
        return [rq for rq in self.runqueues if rq.alive]

    def revive(self) -> None:
        """Start again a runqueue that exited by itself (a process manager would): e.g. one
        that was starting while the database was down."""
        for rq in self.runqueues:
            if rq is not None and not rq.alive:
                self.tally.events[f"runqueue exited by itself with {rq.proc.returncode} (started again)"] += 1
                rq.log.close()
                self.start_runqueue(rq.index)

    def kill_worker(self) -> None:
        candidates = [(rq, pid) for rq in self.live() for pid in rq.workers()]
        if not candidates:
            return
        _, pid = self.rng.choice(candidates)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        self.tally.killed_pids.add(pid)
        self.tally.events["SIGKILL worker process"] += 1

    def freeze_worker(self) -> None:
        """SIGSTOP a worker until its leases ran out and its rows were taken over, then
        SIGCONT: whatever it still wants to write is a late outcome and must be rejected."""
        candidates = [pid for rq in self.live() for pid in rq.workers()]
        if not candidates:
            return
        pid = self.busy_worker(candidates) or self.rng.choice(candidates)
        try:
            os.kill(pid, signal.SIGSTOP)
            self.tally.frozen_pids.add(pid)
            self.tally.events["SIGSTOP worker past its lease"] += 1
            time.sleep(self.config.lease * 2.5)
        finally:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    def busy_worker(self, candidates: list[int]) -> int | None:
        """A worker in the middle of a lease-mode batch: it ran a handler whose row is
        still RUNNING (its outcome not flushed yet)."""
        from django.db import connection

        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            try:
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT l.pid FROM testapp_chaosledger l JOIN testapp_chaosleasejob j "
                        "ON j.id = l.job_id AND l.kind = 'lease' WHERE j.queue_state = 'running' "
                        "ORDER BY l.id DESC LIMIT 20"
                    )
                    busy = [pid for (pid,) in cursor.fetchall() if pid in candidates]
            except Exception as exc:  # noqa: BLE001
                self.db_error("freeze probe", exc)
                busy = []
            if busy:
                return busy[0]
            time.sleep(0.05)
        return None

    def kill_runqueue(self) -> None:
        rq = self.rng.choice(self.runqueues)
        self.tally.killed_pids.update(rq.kill_all())
        self.tally.events["SIGKILL whole runqueue"] += 1
        time.sleep(self.rng.uniform(0.5, 1.5))
        self.start_runqueue(rq.index)

    def terminate_runqueue(self) -> None:
        self.revive()
        rq = self.rng.choice(self.runqueues)
        code = rq.terminate()
        self.tally.sigterm_exit_codes.append(code)
        self.tally.events["SIGTERM runqueue"] += 1
        self.start_runqueue(rq.index)

    def kill_connections(self) -> None:
        from django.db import connection

        started = self.db_now()
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT id FROM information_schema.processlist WHERE user = %s", [WORKER_USER])
                ids = [row[0] for row in cursor.fetchall()]
                victims = self.rng.sample(ids, min(len(ids), self.rng.randint(1, 3)))
                for victim in victims:
                    try:
                        cursor.execute("KILL CONNECTION %s", [int(victim)])
                    except Exception:  # noqa: BLE001 - it may have gone meanwhile
                        continue
                    self.tally.events["KILL CONNECTION"] += 1
        except Exception as exc:  # noqa: BLE001
            self.db_error("kill-connection", exc)
        self.tally.faults.append(Fault("KILL CONNECTION", started, self.db_now()))

    def restart_database(self, crash: bool) -> None:
        from django.db import connection

        started = self.db_now()
        connection.close()
        self.db.stop(crash=crash)
        time.sleep(self.config.restart_downtime)
        startup = self.db.start()
        up_mono = time.monotonic()
        up = self.db_now()
        self.tally.events["database crash (SIGKILL mariadbd)" if crash else "database restart (SIGTERM)"] += 1
        self.tally.faults.append(Fault("restart", started, up, "crash" if crash else "clean"))
        # Recovery: the first outcome any worker records after the server is back, and the
        # moment every runqueue has recorded one (all of them reconnected by themselves).
        first, everyone, names = None, None, set()
        prefixes = {rq.name.rsplit("g", 1)[0] for rq in self.runqueues}
        deadline = up_mono + 120
        while time.monotonic() < deadline and everyone is None:
            self.revive()
            names = self.outcome_workers_since(up)
            if names and first is None:
                first = time.monotonic() - up_mono
            if {n.rsplit("g", 1)[0] for n in names} >= prefixes:
                everyone = time.monotonic() - up_mono
            time.sleep(0.1)
        self.tally.recoveries.append(
            {
                "kind": "crash" if crash else "clean",
                "down_s": round((up - started).total_seconds(), 2),
                "server_start_s": round(startup, 2),
                "first_outcome_s": None if first is None else round(first, 2),
                "all_runqueues_back_s": None if everyone is None else round(everyone, 2),
                **({} if everyone else {"missing": sorted(prefixes - {n.rsplit("g", 1)[0] for n in names})}),
            }
        )

    def outcome_workers_since(self, since: datetime) -> set[str]:
        from django_dbqueue.models import QueueAttempt

        try:
            names = (
                QueueAttempt.objects.filter(finished_at__gte=since)
                .exclude(outcome="lost")
                .values_list("worker_id", flat=True)
                .distinct()
            )
            # worker ids are <runqueue name>-<index>
            return {name.rsplit("-", 1)[0] for name in names}
        except Exception as exc:  # noqa: BLE001
            self.db_error("recovery probe", exc)
            return set()

    # -- the run ---------------------------------------------------------------------------

    def schedule(self) -> list[tuple[float, str]]:
        cfg, rng = self.config, self.rng
        events: list[tuple[float, str]] = []

        def spread(count: int, kind: str, low: float = 0.05, high: float = 0.92) -> None:
            for i in range(count):
                slot = low + (high - low) * (i + rng.uniform(0.1, 0.9)) / max(count, 1)
                events.append((slot * cfg.duration, kind))

        spread(cfg.worker_kills, "kill worker")
        spread(cfg.supervisor_kills, "kill runqueue")
        spread(cfg.sigterms, "sigterm runqueue")
        spread(cfg.connection_kills, "kill connections")
        spread(cfg.freezes, "freeze worker")
        for i in range(cfg.restarts):
            events.append(
                ((i + 1) / (cfg.restarts + 1) * cfg.duration, "crash db" if i % 2 else "restart db")
            )
        return sorted(events)

    def run(self) -> dict[str, Any]:
        cfg = self.config
        self.started = time.monotonic()
        self.setup()
        from tests.testapp.models import ChaosAtomicJob, ChaosLeaseJob

        run_started = self.db_now()
        per_model = cfg.rows // 2
        size = 50
        self.batches = per_model // size
        seeded = int(self.batches * cfg.seed_fraction)
        for model in (ChaosLeaseJob, ChaosAtomicJob):
            for number in range(seeded):
                self.insert_batch(model, number, self.make_rows(model, size, number))
        timings = {"setup_s": round(time.monotonic() - self.started, 1)}

        self.runqueues = [None] * cfg.supervisors  # type: ignore[list-item]
        self.generations = [-1] * cfg.supervisors
        for index in range(cfg.supervisors):
            self.start_runqueue(index)
        chaos_started = time.monotonic()
        live = list(range(seeded, self.batches))
        pace = cfg.duration * 0.85 / max(len(live), 1)
        sizes = dict.fromkeys(range(self.batches), size)
        self.threads = [
            threading.Thread(
                target=self.publisher, args=(model, live, sizes, pace), name=f"pub-{model.__name__}"
            )
            for model in (ChaosLeaseJob, ChaosAtomicJob)
        ]
        self.threads += [
            threading.Thread(target=self.operator, name="operator"),
            threading.Thread(target=self.purger, name="purge"),
        ]
        for thread in self.threads:
            thread.start()
        try:
            for at, kind in self.schedule():
                while (delay := chaos_started + at - time.monotonic()) > 0:
                    time.sleep(min(delay, 0.5))
                    self.revive()
                {
                    "kill worker": self.kill_worker,
                    "kill runqueue": self.kill_runqueue,
                    "sigterm runqueue": self.terminate_runqueue,
                    "kill connections": self.kill_connections,
                    "freeze worker": self.freeze_worker,
                    "restart db": lambda: self.restart_database(crash=False),
                    "crash db": lambda: self.restart_database(crash=True),
                }[kind]()
            for thread in self.threads[:2]:
                thread.join()
            timings["chaos_s"] = round(time.monotonic() - chaos_started, 1)
            settle_started = time.monotonic()
            settled = self.settle()
            self.stop_threads.set()
            for thread in self.threads:
                thread.join()
            timings["settle_s"] = round(time.monotonic() - settle_started, 1)
            for rq in self.runqueues:
                if rq.alive:
                    rq.terminate()
            results = self.analyse(run_started)
            results["settled"] = settled
        finally:
            self.stop_threads.set()
            for rq in self.runqueues:
                if rq is not None and rq.alive:
                    rq.kill_all()
            from django.db import connections

            connections.close_all()
            if not cfg.keep_data:
                self.db.destroy()
            else:
                self.db.stop()
        timings["total_s"] = round(time.monotonic() - self.started, 1)
        results["timings"] = timings
        results["config"] = asdict(cfg)
        (self.base / "results.json").write_text(json.dumps(results, indent=2, default=str))
        return results

    def settle(self) -> bool:
        """All runqueues up, chaos over: wait until no row is due or running."""
        from tests.testapp.models import ChaosAtomicJob, ChaosLeaseJob

        for rq in self.runqueues:
            if not rq.alive:
                self.start_runqueue(rq.index)
        deadline = time.monotonic() + self.config.settle_timeout
        while time.monotonic() < deadline:
            self.revive()
            try:
                pending = sum(
                    m.objects.filter(queue_state__in=("ready", "running", "idle")).count()
                    for m in (ChaosLeaseJob, ChaosAtomicJob)
                )
            except Exception as exc:  # noqa: BLE001
                self.db_error("settle", exc)
                continue
            if pending == 0:
                return True
            time.sleep(0.5)
        return False

    # -- the counters ----------------------------------------------------------------------

    def analyse(self, run_started: datetime) -> dict[str, Any]:
        from django.db.models import Sum

        from django_dbqueue.models import QueueAttempt
        from tests.testapp.models import (
            ChaosArchive,
            ChaosAtomicJob,
            ChaosAtomicOptimisticJob,
            ChaosAtomicSingleJob,
            ChaosBatch,
            ChaosLeaseJob,
            ChaosLedger,
        )

        counters: dict[str, Any] = {}
        self.unexplained: list[dict[str, Any]] = []
        explained: Counter = Counter()
        samples: list[dict[str, Any]] = []
        logs = "\n".join(p.read_text(errors="replace") for p in sorted(self.logdir.glob("*.log")))
        # Log lines carry the pid (tests/chaos/settings.py): which worker processes saw their
        # session die, and which gave up a batch because of a deadlock or lock wait.
        lost_session = re.compile(
            r"^\S+ \S+ (\d+) .*(?:database error \(\((?:2006|2013|2002|1927|4031)|lease renewal .* failed)"
        )
        deadlocked = re.compile(r"^\S+ \S+ (\d+) .*database error \(\((?:1213|1205)")
        self.disconnected_pids = {
            int(m.group(1)) for line in logs.splitlines() if (m := lost_session.match(line))
        }
        self.errored_pids = {int(m.group(1)) for line in logs.splitlines() if (m := deadlocked.match(line))}
        for model in (ChaosLeaseJob, ChaosAtomicJob):
            kind = model.chaos_kind
            expected = ChaosBatch.objects.filter(model=model._meta.label).aggregate(n=Sum("size"))["n"] or 0
            rows: dict[int, tuple[str, int, int, str]] = {
                pk: (state, attempts, fail, error)
                for pk, state, attempts, fail, error in model.objects.values_list(
                    "pk", "queue_state", "queue_attempts", "fail_times", "queue_last_error"
                )
            }
            for pk, state, attempts, fail, error in ChaosArchive.objects.filter(kind=kind).values_list(
                "job_id", "state", "attempts", "fail_times", "last_error"
            ):
                rows.setdefault(pk, (state, attempts, fail, error))
            runs: dict[int, dict[int, int]] = defaultdict(dict)
            workers: dict[tuple[int, int], str] = {}
            for job, attempt, pid, worker in ChaosLedger.objects.filter(kind=kind).values_list(
                "job_id", "attempt", "pid", "worker"
            ):
                runs[job][attempt] = pid
                workers[job, attempt] = worker
            history: dict[tuple[int, int], list[tuple[str, str, datetime | None]]] = defaultdict(list)
            for object_id, attempt, outcome, worker, claimed in QueueAttempt.objects.filter(
                model__in=table_labels(model)
            ).values_list("object_id", "attempt", "outcome", "worker_id", "claimed_at"):
                history[int(object_id), attempt].append((outcome, worker, claimed))

            unfinished = sum(1 for s, *_ in rows.values() if s not in ("succeeded", "failed", "cancelled"))
            counters[f"{kind}: rows expected"] = expected
            counters[f"{kind}: rows accounted for"] = len(rows)
            counters[f"{kind}: rows lost"] = (expected - len(rows)) + unfinished
            counters[f"{kind}: stuck RUNNING"] = sum(1 for s, *_ in rows.values() if s == "running")
            counters[f"{kind}: succeeded"] = sum(1 for s, *_ in rows.values() if s == "succeeded")
            counters[f"{kind}: poison rows FAILED with a reason"] = sum(
                1 for s, _, f, e in rows.values() if s == "failed" and f == POISON and e
            )
            counters[f"{kind}: wrong final state"] = sum(
                1
                for s, _, f, e in rows.values()
                if (f == POISON and not (s == "failed" and e)) or (f != POISON and s != "succeeded")
            )
            counters[f"{kind}: planned failures retried"] = sum(
                1 for (job, _), h in history.items() if any(o == "retried" for o, _, _ in h)
            )
            if kind == "atomic":
                # Rows run one per transaction (the proxy; on MariaDB the carried commit) rather
                # than in groups of four: the history records the model that ran them.
                counters["atomic: attempts run one per transaction"] = QueueAttempt.objects.filter(
                    model=ChaosAtomicSingleJob._meta.label
                ).count()
                counters["atomic: attempts run in optimistic groups"] = QueueAttempt.objects.filter(
                    model=ChaosAtomicOptimisticJob._meta.label
                ).count()
                counters["atomic: rows whose effects committed more than once"] = sum(
                    1 for r in runs.values() if len(r) > 1
                )
                counters["atomic: succeeded rows without their effect"] = sum(
                    1 for pk, (s, *_) in rows.items() if s == "succeeded" and len(runs.get(pk, {})) != 1
                )
                counters["atomic: failed rows with a committed effect"] = sum(
                    1 for pk, (s, *_) in rows.items() if s == "failed" and runs.get(pk)
                )
            else:
                reruns = 0
                unexplained = 0
                for job, attempts in runs.items():
                    state, final, fail, _ = rows.get(job, ("?", 0, 0, ""))
                    for attempt, pid in attempts.items():
                        outcomes = {o for o, _, _ in history.get((job, attempt), [])}
                        if "lost" in outcomes:
                            reruns += 1
                            why = self.cause(pid, history[job, attempt])
                            explained[why] += 1
                            if why == "lease lost by a live worker" and len(samples) < 20:
                                samples.append(
                                    {
                                        "job": job,
                                        "attempt": attempt,
                                        "pid": pid,
                                        "worker": workers[job, attempt],
                                    }
                                )
                        elif attempt == final and state == "succeeded" and "succeeded" in outcomes:
                            pass  # the run that counted
                        elif outcomes & {"retried", "failed"}:
                            pass  # a (planned) failure, recorded
                        else:
                            unexplained += 1
                            if len(self.unexplained) < 10:
                                self.unexplained.append(
                                    {
                                        "job": job,
                                        "attempt": attempt,
                                        "pid": pid,
                                        "state": state,
                                        "final attempt": final,
                                        "history": sorted(
                                            (a, o)
                                            for (j, a), entries in history.items()
                                            if j == job
                                            for o, _, _ in entries
                                        ),
                                    }
                                )
                counters["lease: re-runs (after a lost lease)"] = reruns
                counters["lease: runs not explained by an outcome or a lost lease"] = unexplained
                counters["lease: succeeded rows that never ran"] = sum(
                    1 for pk, (s, *_) in rows.items() if s == "succeeded" and not runs.get(pk)
                )
            # The ledger is unique per (row, attempt): two live claims of one attempt would
            # make the second handler fail with this constraint's name in its error.
            counters[f"{kind}: two runs of one attempt (IntegrityError)"] = QueueAttempt.objects.filter(
                model__in=table_labels(model), error__contains="chaos_ledger_one_run_per_attempt"
            ).count()

        counters["late outcomes rejected (log lines)"] = logs.count("late outcome rejected") + logs.count(
            "is no longer held by worker"
        )
        counters["rows rescued after an expired lease (log lines)"] = len(
            re.findall(r"rescued \S+ pk=", logs)
        )
        counters["worker reconnects after a database error (log lines)"] = logs.count("database error (")
        counters["claim/rescue retries after a deadlock or lock wait (log lines)"] = logs.count(
            "hit a lock conflict"
        )
        counters["atomic groups rolled back by a database error (log lines)"] = logs.count("rolled back:")
        counters["worker processes replaced by their supervisor (log lines)"] = logs.count("replacing it in")
        skewed = QueueAttempt.objects.filter(worker_id__startswith="skew").exclude(outcome="lost")
        counters["outcomes recorded by clock-skewed workers"] = skewed.count()
        counters["clock-skewed outcomes with times off by > 60 s"] = sum(
            1
            for claimed, finished in skewed.values_list("claimed_at", "finished_at")
            if claimed is None or not timedelta(0) <= finished - claimed <= timedelta(seconds=60)
        )
        late = QueueAttempt.objects.filter(finished_at__lt=run_started - timedelta(seconds=60)).count()
        counters["attempts dated before the run (clock errors)"] = late
        return {
            "counters": counters,
            "lease re-runs by cause": dict(explained),
            "re-runs by a live worker (samples)": samples,
            "events": dict(self.tally.events),
            "killed pids": len(self.tally.killed_pids),
            "sigterm exit codes": self.tally.sigterm_exit_codes,
            "recoveries": self.tally.recoveries,
            "unexplained runs (samples)": self.unexplained,
            "clock skew": {offset: self.skew_check(offset) for offset in self.config.skews},
        }

    def cause(self, pid: int, history: list[tuple[str, str, datetime | None]]) -> str:
        if pid in self.tally.frozen_pids:
            return "its worker was frozen (SIGSTOP) past its lease"
        if pid in self.tally.killed_pids:
            return "its worker was SIGKILLed"
        if pid in self.disconnected_pids:
            return "its worker lost its database session (restart or KILL CONNECTION)"
        if pid in self.errored_pids:
            return "its worker dropped the batch after a deadlock on an outcome write"
        return "lease lost by a live worker"


# -- checks and report --------------------------------------------------------------------------

MUST_BE_ZERO = (
    "lease: rows lost",
    "atomic: rows lost",
    "lease: stuck RUNNING",
    "atomic: stuck RUNNING",
    "lease: wrong final state",
    "atomic: wrong final state",
    "atomic: rows whose effects committed more than once",
    "atomic: succeeded rows without their effect",
    "atomic: failed rows with a committed effect",
    "lease: runs not explained by an outcome or a lost lease",
    "lease: succeeded rows that never ran",
    "lease: two runs of one attempt (IntegrityError)",
    "atomic: two runs of one attempt (IntegrityError)",
    "clock-skewed outcomes with times off by > 60 s",
    "attempts dated before the run (clock errors)",
)


def problems(results: dict[str, Any]) -> list[str]:
    counters = results["counters"]
    found = [f"{name} = {counters.get(name)}" for name in MUST_BE_ZERO if counters.get(name)]
    if not results.get("settled"):
        found.append("the queue did not settle (rows still due or running)")
    if counters.get("outcomes recorded by clock-skewed workers", 0) == 0:
        found.append("the clock-skewed workers recorded no outcome")
    if any(code != 0 for code in results["sigterm exit codes"]):
        found.append(f"a SIGTERMed runqueue exited with {results['sigterm exit codes']}")
    for offset, measured in results["clock skew"].items():
        if abs(measured - parse_offset(offset)) > 60:
            found.append(f"a runqueue meant to be {offset} off had a clock {measured} s off")
    for recovery in results["recoveries"]:
        if recovery["all_runqueues_back_s"] is None:
            found.append(f"the workers did not all recover after a database {recovery['kind']}")
    reruns = results["counters"].get("lease: re-runs (after a lost lease)", 0)
    by_live = results["lease re-runs by cause"].get("lease lost by a live worker", 0)
    if reruns and by_live:
        found.append(f"{by_live} lease re-run(s) happened without a kill or a database fault")
    by_deadlock = results["lease re-runs by cause"].get(
        "its worker dropped the batch after a deadlock on an outcome write", 0
    )
    if by_deadlock:
        found.append(f"{by_deadlock} lease re-run(s) were caused by a deadlock (DESIGN: never)")
    return found


def table(results: dict[str, Any]) -> str:
    lines = ["", "Chaos run results", "=" * 78]
    width = 66

    def row(name: str, value: Any) -> None:
        lines.append(f"{name:<{width}} {value!s:>11}")

    lines.append("Faults injected and load")
    for name, value in sorted(results["events"].items()):
        row(f"  {name}", value)
    lines.append("Counters")
    for name, value in results["counters"].items():
        mark = "  " if name not in MUST_BE_ZERO else ("! " if value else "0=")
        row(f"{mark}{name}", value)
    lines.append("Lease-mode re-runs by cause")
    for name, value in results["lease re-runs by cause"].items():
        row(f"  {name}", value)
    lines.append("Recovery after database restarts (s after the server answered)")
    for recovery in results["recoveries"]:
        lines.append(f"  {recovery}")
    lines.append(f"SIGTERM exit codes: {results['sigterm exit codes']}")
    lines.append(f"Clock offsets of the skewed runqueues (s, measured): {results['clock skew']}")
    lines.append(f"Timings (s): {results['timings']}")
    found = problems(results)
    lines.append("=" * 78)
    lines.append("PASS: nothing lost, nothing doubled" if not found else "FAIL: " + "; ".join(found))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--long", action="store_true", help="the long variant (make chaos)")
    parser.add_argument("--rows", type=int)
    parser.add_argument("--duration", type=float)
    parser.add_argument("--workdir", help="a new or empty folder (default: a private temporary one)")
    parser.add_argument("--keep-data", action="store_true", help="keep the server's data and the folder")
    parser.add_argument("--json", help="also write the results here (outside the git tree, or ignored)")
    args = parser.parse_args(argv)
    config = LONG if args.long else QUICK
    overrides = {
        k: v for k, v in (("rows", args.rows), ("duration", args.duration), ("workdir", args.workdir)) if v
    }
    config = replace(config, keep_data=args.keep_data, **overrides)
    harness = Harness(config)
    results = harness.run()
    return report_run(table(results), problems(results), results, args.json, harness.base, config)


def report_run(
    text: str, found: list[str], results: dict, json_path: str | None, base: Path, config: Any
) -> int:
    """The end of a chaos run's command: its table printed, its results written to
    ``json_path`` if given, its private folder kept when it failed or was asked to keep data
    (``config.keep_data``, ``config.workdir``) and removed otherwise; the exit status."""
    print(text, flush=True)
    if json_path:
        out = Path(json_path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2, default=str))
        print(f"results: {out}")
    if found or config.keep_data or config.workdir is not None:
        print(f"logs and results.json: {base}")
    else:
        shutil.rmtree(base, ignore_errors=True)  # a passing run's private folder
    return 1 if found else 0
