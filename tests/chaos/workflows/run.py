"""The workflow chaos run's processes and faults (see the package's docstring).

It reuses the chaos suite's pieces: ``Runqueue`` (one ``manage.py runqueue`` supervisor and
its workers, logging with their pids), the private servers and their settings
(``tests.chaos.settings``), and the private temporary folder of each run."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import time
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from ..harness import Runqueue, migrate_private_database, private_workdir
from ..mariadb import WORKER_USER, PrivateMariaDB
from ..postgres import PrivatePostgres
from .verdict import Faults, Mode, counters, unfinished_rows

MODELS = ("testapp.AtomicWorkflow", "testapp.LeaseWorkflow")


@dataclass
class Config:
    rows: int = 2_000  # per mode
    steps: int = 5
    pause: float = 0.01  # seconds each step's body works: the kills land inside steps
    supervisors: int = 2
    concurrency: int = 2  # worker processes per supervisor
    batch_size: int = 10
    lease: float = 2.0
    kill_every: float = 3.0  # seconds between kills, on average
    runqueue_kill_every: int = 5  # every n-th kill takes a whole runqueue
    restart_at: float = 0.4  # share of the step bodies run when the server is crashed
    restart_downtime: float = 2.0
    crash: bool = True  # SIGKILL mariadbd / pg_ctl -m immediate; False: a clean shutdown
    timeout: float = 900.0
    seed: int = 36
    server: str = "mariadb"
    workdir: str | None = None
    keep_data: bool = False
    skews: tuple[str, ...] = ()  # Runqueue reads it: no skewed clocks here


# Steps of 50 ms and a kill every ~1.2 s: a few kills land even when the machine is idle and
# the 60 rows a mode are done in seconds.
QUICK = Config(rows=60, pause=0.05, kill_every=1.2, timeout=240.0)
FULL = Config()


class WorkflowChaos:
    """Runs the workflows to the end under the faults; :meth:`run` returns the results."""

    models = MODELS
    settings_module = "tests.chaos.settings"

    def __init__(self, config: Config) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.base = private_workdir(config.workdir)
        self.logdir = self.base / "logs"
        folder = self.base / config.server
        self.db = PrivatePostgres(folder) if config.server == "postgresql" else PrivateMariaDB(folder)
        self.worker_env: dict[str, str] = {}
        self.runqueues: list[Runqueue] = []
        self.generations: list[int] = []
        self.events: Counter = Counter()
        self.killed: set[int] = set()
        self.recoveries: list[dict[str, Any]] = []

    # -- set-up --------------------------------------------------------------------------------

    def setup(self) -> None:
        self.logdir.mkdir(parents=True)
        self.db.create()
        worker = self.db.url(WORKER_USER) if isinstance(self.db, PrivateMariaDB) else self.db.url()
        self.worker_env = migrate_private_database(self.db.url(), worker)
        from tests.testapp.models import AtomicWorkflow, LeaseWorkflow

        for model in (AtomicWorkflow, LeaseWorkflow):
            rows = [model(steps=self.config.steps, pause=self.config.pause) for _ in range(self.config.rows)]
            model.objects.bulk_create(rows, batch_size=1000)

    def skew_env(self, offset: str) -> dict[str, str]:
        return {}

    # -- the database, through its restarts ------------------------------------------------------

    def query(self, fn: Any) -> Any:
        """``fn()`` against the database, retried (on a fresh connection) while it is down."""
        from django.db import connection

        for _ in range(600):
            try:
                return fn()
            except Exception:  # noqa: BLE001 - down or restarting: try again
                connection.close()
                time.sleep(0.2)
        raise RuntimeError("the database does not answer")

    def bodies_run(self) -> int:
        from tests.testapp.models import StepLedger

        return self.query(StepLedger.objects.count)

    def unfinished(self) -> int:
        from tests.testapp.models import AtomicWorkflow, LeaseWorkflow

        return self.query(
            lambda: sum(
                m.objects.exclude(queue_state="succeeded").count() for m in (AtomicWorkflow, LeaseWorkflow)
            )
        )

    # -- processes and faults ----------------------------------------------------------------------

    def start_runqueue(self, index: int) -> None:
        self.generations[index] += 1
        self.runqueues[index] = Runqueue(self, index, self.generations[index])  # type: ignore[arg-type]

    def revive(self) -> None:
        """Start again a runqueue that exited by itself (a process manager would)."""
        for rq in self.runqueues:
            if not rq.alive:
                self.events[f"runqueue exited by itself with {rq.proc.returncode} (started again)"] += 1
                rq.log.close()
                self.start_runqueue(rq.index)

    def kill(self, number: int) -> None:
        if number % self.config.runqueue_kill_every == 0:
            rq = self.rng.choice(self.runqueues)
            self.killed.update(rq.kill_all())
            self.events["SIGKILL whole runqueue"] += 1
            self.start_runqueue(rq.index)
            return
        candidates = [pid for rq in self.runqueues if rq.alive for pid in rq.workers()]
        if not candidates:
            return
        pid = self.rng.choice(candidates)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        self.killed.add(pid)
        self.events["SIGKILL worker process"] += 1

    def restart_database(self) -> None:
        from django.db import connection

        connection.close()
        before = self.bodies_run()
        self.db.stop(crash=self.config.crash)
        time.sleep(self.config.restart_downtime)
        startup = self.db.start()
        up = time.monotonic()
        self.events["database restart"] += 1
        # Recovery: until the workers ran step bodies again, by themselves.
        while self.bodies_run() <= before and time.monotonic() - up < 120:
            time.sleep(0.1)
        self.recoveries.append(
            {
                "kind": "crash" if self.config.crash else "clean",
                "server_start_s": round(startup, 2),
                "steps_again_after_s": round(time.monotonic() - up, 2),
            }
        )

    def chaos(self) -> bool:
        """Kills every few seconds and one restart, until every workflow finished."""
        cfg = self.config
        total = 2 * cfg.rows * cfg.steps
        deadline = time.monotonic() + cfg.timeout
        number, restarted = 0, False
        while time.monotonic() < deadline:
            time.sleep(self.rng.uniform(0.5, 1.5) * cfg.kill_every)
            self.revive()
            if self.unfinished() == 0:
                return True
            if not restarted and self.bodies_run() >= cfg.restart_at * total:
                self.restart_database()
                restarted = True
                continue
            number += 1
            self.kill(number)
        return False

    # -- the run -------------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        cfg = self.config
        started = time.monotonic()
        timings: dict[str, float] = {}
        try:
            self.setup()
            timings["setup_s"] = round(time.monotonic() - started, 1)
            self.runqueues = [None] * cfg.supervisors  # type: ignore[list-item]
            self.generations = [-1] * cfg.supervisors
            for index in range(cfg.supervisors):
                self.start_runqueue(index)
            chaos_started = time.monotonic()
            settled = self.chaos()
            timings["run_s"] = round(time.monotonic() - chaos_started, 1)
            for rq in self.runqueues:
                if rq.alive:
                    rq.terminate()
            results = self.analyse()
            results["settled"] = settled
        finally:
            for rq in self.runqueues:
                if rq is not None and rq.alive:
                    rq.kill_all()
            from django.db import connections

            connections.close_all()
            if not cfg.keep_data:
                self.db.destroy()
            else:
                self.db.stop()
        timings["total_s"] = round(time.monotonic() - started, 1)
        results["timings"] = timings
        results["config"] = asdict(cfg)
        (self.base / "results.json").write_text(json.dumps(results, indent=2, default=str))
        return results

    def analyse(self) -> dict[str, Any]:
        from django.db import connection

        from tests.testapp.models import AtomicWorkflow, LeaseWorkflow

        faults = Faults(killed_pids=set(self.killed), disconnected_pids=self.disconnected())
        found: dict[str, int] = {}
        stuck: list[str] = []
        for name, model in (("atomic", AtomicWorkflow), ("lease", LeaseWorkflow)):
            mode = self.mode(name, model)
            found.update(counters(mode, faults))
            stuck += unfinished_rows(mode)
            stuck += self.histories(model, mode)
        with connection.cursor() as cursor:
            cursor.execute("SELECT VERSION()")
            version = cursor.fetchone()[0].split(" on ")[0]
        return {
            "server": f"private {self.config.server} server: {version}",
            "counters": found,
            "events": dict(self.events),
            "killed pids": len(self.killed),
            "recoveries": self.recoveries,
            "unfinished": stuck,
        }

    def mode(self, name: str, model: type) -> Mode:
        from django_dbqueue.models import WorkflowStep
        from tests.testapp.models import StepLedger

        rows = {
            pk: (state, error)
            for pk, state, error in model.objects.values_list("pk", "queue_state", "queue_last_error")
        }
        ledger = list(
            StepLedger.objects.filter(kind=model.__name__).values_list(
                "job_id", "step", "pid", "after_checkpoint"
            )
        )
        checkpoints: dict[int, dict[str, Any]] = {}
        steps = WorkflowStep.objects.filter(model=model._meta.label).values_list(
            "object_pk", "name", "result"
        )
        for object_pk, step, result in steps:
            checkpoints.setdefault(int(object_pk), {})[step] = result
        return Mode(name, self.config.steps, rows, ledger, checkpoints)

    def histories(self, model: type, mode: Mode) -> list[str]:
        """The attempt history of each row that did not finish: why its attempts ended."""
        from django_dbqueue.models import QueueAttempt

        lines = []
        for pk, (state, _error) in sorted(mode.rows.items()):
            if state == "succeeded":
                continue
            attempts = QueueAttempt.objects.filter(model=model._meta.label, object_id=str(pk)).order_by("pk")
            for number, outcome, error in attempts.values_list("attempt", "outcome", "error"):
                lines.append(f"  {mode.name} row {pk} attempt {number}: {outcome}, {error[:90]!r}")
        return lines

    def disconnected(self) -> set[int]:
        """Worker pids whose log shows a lost database session (the log lines carry the pid:
        tests/chaos/settings.py)."""
        lost = re.compile(r"^\S+ \S+ (\d+) .*(?:database error|lease renewal .* failed)")
        logs = "\n".join(p.read_text(errors="replace") for p in sorted(self.logdir.glob("*.log")))
        return {int(m.group(1)) for line in logs.splitlines() if (m := lost.match(line))}
