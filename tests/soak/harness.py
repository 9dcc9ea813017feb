"""The soak run (``make soak``): real processes on a fresh ``soak_<pid>`` database of the shared
MariaDB server, for ``--minutes``.

1. **Capacity**: the publisher inserts a backlog, then one ``runqueue --concurrency 4`` (the
   chaos suite's :class:`~tests.chaos.harness.Runqueue`) drains it; attempts per second from
   the first claim to the empty queue is the capacity.
2. **Soak**: the publisher (a process of its own) enqueues at ``load`` x capacity for the whole
   run while the same runqueue works; every ``kill_every`` s the oldest worker process that is
   not spared is SIGKILLed (its supervisor replaces it); every ``purge_every`` s ``purgequeue``
   deletes finished messages, tasks and attempt history. Every ``sample_every`` s the sampler
   reads each worker's RSS from ``/proc``, the backlog, and the new attempt-history rows (due
   and claim times) before the purge deletes them.
3. **Settle and count**: when the publisher is done and the queue is empty, the runqueue is
   stopped with SIGTERM and every published item is accounted for (:func:`analysis.account`).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from django_dbqueue.compat import UTC
from tests.chaos.faults import servers
from tests.chaos.harness import ROOT, Runqueue, private_workdir

from . import collect, report

MODELS = ("django_dbqueue.Message", "django_dbqueue.TaskRecord")


@dataclass
class Config:
    minutes: float = 30.0
    concurrency: int = 4  # worker processes of the one runqueue
    spare: int = 1  # worker processes never killed: RSS series as long as the run
    kill_every: float = 60.0
    purge_every: float = 120.0
    purge_older_than: float = 60.0  # finished messages and tasks older than this (s)
    attempts_older_than: float = 120.0  # attempt history older than this (s)
    sample_every: float = 10.0
    load: float = 0.7  # of the measured capacity
    capacity_rows: int = 12_000
    batch_size: int = 20
    lease: float = 5.0
    rss_warmup: float = 120.0
    settle_timeout: float = 180.0
    seed: int = 25
    skews: tuple[str, ...] = ()  # Runqueue reads it: no clock-skewed hosts here

    @classmethod
    def for_minutes(cls, minutes: float, **overrides: Any) -> Config:
        """Short runs scale the periods down so that a 2-minute run kills, purges and samples
        several times; from 10 minutes on, the periods of the issue (1 min, 2 min)."""
        if minutes >= 10:
            return cls(minutes=minutes, **overrides)
        span = minutes * 60
        scaled = {
            "kill_every": max(10.0, span / 6),
            "purge_every": max(20.0, span / 3),
            "purge_older_than": 20.0,
            "attempts_older_than": 40.0,
            "rss_warmup": 30.0,
            "capacity_rows": 3_000,
            "settle_timeout": 120.0,
        }
        return cls(minutes=minutes, **{**scaled, **overrides})


def rss_kb(pid: int) -> int | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
    return int(match.group(1)) if match else None


class Soak:
    models = MODELS
    settings_module = "tests.soak.settings"

    def __init__(self, config: Config) -> None:
        self.config = config
        self.base = private_workdir(None)
        self.logdir = self.base / "logs"
        self.worker_env: dict[str, str] = {}
        self.runqueue: Runqueue | None = None
        self.generation = 0
        self.t0 = 0.0  # monotonic start of the soak phase (samples are timed from it)
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.rss: dict[int, dict[str, Any]] = {}  # pid -> {"role", "samples": [(t, kb)]}
        self.first_seen: dict[int, float] = {}
        self.spared: set[int] = set()
        self.killed: set[int] = set()
        self.kills: list[dict[str, Any]] = []
        self.purges: list[dict[str, Any]] = []
        self.events: dict[str, int] = {}
        self.collector: collect.Collector | None = None

    # -- processes -------------------------------------------------------------------------

    def python(self, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, *args],
            cwd=ROOT,
            env=self.worker_env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start_runqueue(self) -> None:
        self.runqueue = Runqueue(self, 0, self.generation)  # type: ignore[arg-type] - duck-typed harness
        self.generation += 1

    def workers(self) -> list[int]:
        return self.runqueue.workers() if self.runqueue and self.runqueue.alive else []

    def wait_for_workers(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while len(self.workers()) < self.config.concurrency:
            if time.monotonic() > deadline:
                raise RuntimeError(f"runqueue did not start its workers; see {self.logdir}")
            time.sleep(0.2)

    def kill_one(self) -> None:
        now = time.monotonic()
        candidates = [pid for pid in self.workers() if pid not in self.spared]
        if not candidates:
            return
        victim = min(candidates, key=lambda pid: self.first_seen.get(pid, now))  # the oldest
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            return
        with self.lock:
            self.killed.add(victim)
            self.kills.append(
                {
                    "at_s": round(now - self.t0, 1),
                    "pid": victim,
                    "age_s": round(now - self.first_seen.get(victim, now), 1),
                }
            )

    def purge(self) -> None:
        cfg, began = self.config, time.monotonic()
        proc = self.python(
            "-m",
            "django",
            "purgequeue",
            "--older-than",
            f"{cfg.purge_older_than:g}s",
            "--attempts-older-than",
            f"{cfg.attempts_older_than:g}s",
            "--settings",
            self.settings_module,
            timeout=600,
        )
        deleted = {
            m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+(?:\.\w+)?): (\d+)", proc.stdout, re.M)
        }
        with self.lock:
            self.purges.append(
                {
                    "at_s": round(began - self.t0, 1),
                    "seconds": round(time.monotonic() - began, 2),
                    "exit": proc.returncode,
                    "deleted": deleted,
                    **({"stderr": proc.stderr[-2000:]} if proc.returncode else {}),
                }
            )

    # -- sampling --------------------------------------------------------------------------

    def sample_rss(self) -> None:
        now = time.monotonic()
        at = round(now - self.t0, 1) if self.t0 else round(-(now - self.started), 1)
        supervisor = [self.runqueue.proc.pid] if self.runqueue and self.runqueue.alive else []
        for pid in [*supervisor, *self.workers()]:
            kb = rss_kb(pid)
            if kb is None:
                continue
            self.first_seen.setdefault(pid, now)
            series = self.rss.setdefault(
                pid, {"role": "supervisor" if pid in supervisor else "worker", "samples": []}
            )
            series["samples"].append((at, kb))

    def sampler(self) -> None:
        from django.db import connection

        try:
            while not self.stop.wait(self.config.sample_every):
                self.sample_rss()
                at = time.monotonic() - self.t0 if self.t0 else None
                if self.collector is not None:
                    self.collector.poll(at)
        finally:
            connection.close()

    # -- the run ---------------------------------------------------------------------------

    def setup(self, url: str) -> None:
        self.logdir.mkdir(parents=True)
        os.environ["CHAOS_DATABASE_URL"] = url
        os.environ["DJANGO_SETTINGS_MODULE"] = self.settings_module
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DBQUEUE_TEST_DB", "DATABASE_URL"))}
        env["PYTHONPATH"] = str(ROOT)
        self.worker_env = env

    def publisher(self, start: int, count: int, rate: float | None) -> subprocess.Popen:
        args = ["-m", "tests.soak.publisher", "--seed", str(self.config.seed), "--start", str(start)]
        args += ["--count", str(count), *(["--rate", f"{rate:.3f}"] if rate else [])]
        return subprocess.Popen(
            [sys.executable, *args],
            cwd=ROOT,
            env=self.worker_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def run(self, database: str | None = None) -> dict[str, Any]:
        cfg = self.config
        self.started = time.monotonic()
        name = database or f"soak_{os.getpid()}"
        results: dict[str, Any] = {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "database": name}
        results["load_before"] = servers.load()
        with servers.fresh_database("mariadb", name) as url:
            self.setup(url)
            self.collector = collect.Collector(cfg.seed)
            results["capacity"] = self.measure_capacity()
            rate = cfg.load * results["capacity"]["items_per_s"]
            count = int(rate * cfg.minutes * 60)
            sampler = threading.Thread(target=self.sampler, name="sampler")
            try:
                self.collector.start_soak()
                self.t0 = time.monotonic()
                sampler.start()
                self.spared = set(sorted(self.workers())[: cfg.spare])
                publisher = self.publisher(cfg.capacity_rows, count, rate)
                self.drive(publisher)
                out, err = publisher.communicate()
                results["publisher"] = collect.last_json(out, err)
                results["publisher"]["rate_per_s"] = round(rate, 1)
                settle_began = time.monotonic()
                results["settled"] = self.collector.settle(cfg.settle_timeout, self.revive)
                results["settle_s"] = round(time.monotonic() - settle_began, 1)
                self.sample_rss()
                self.collector.poll(time.monotonic() - self.t0)
                self.stop.set()
                sampler.join()
                assert self.runqueue is not None
                results["sigterm_exit"] = self.runqueue.terminate()
                results["soak_s"] = round(time.monotonic() - self.t0, 1)
                results.update(self.collector.account(cfg.capacity_rows + count, self.killed))
            finally:
                self.stop.set()
                if self.runqueue is not None and self.runqueue.alive:
                    self.runqueue.kill_all()
                from django.db import connections

                connections.close_all()
        results["load_after"] = servers.load()
        results.update(
            kills=self.kills, purges=self.purges, events=self.events, rss=self.rss, spared=sorted(self.spared)
        )
        results["latency_points"] = len(self.collector.latencies)
        results["backlog"] = self.collector.backlog
        results["config"] = asdict(cfg)
        results["logs"] = str(self.logdir)
        report.summarise(results, self.collector.latencies, cfg.rss_warmup, self.killed)
        return results

    def measure_capacity(self) -> dict[str, Any]:
        """A backlog of ``capacity_rows`` items, then 4 workers drain it: attempts per second
        from the first claim until nothing is due or running."""
        cfg = self.config
        out, err = self.publisher(0, cfg.capacity_rows, None).communicate()
        filled = collect.last_json(out, err)
        self.start_runqueue()
        self.wait_for_workers()
        self.sample_rss()
        assert self.collector is not None
        measured = self.collector.drained(timeout=max(600.0, cfg.capacity_rows / 5), tick=self.sample_rss)
        measured["fill"] = filled
        return measured

    def drive(self, publisher: subprocess.Popen) -> None:
        """Kills and purges on their periods until the publisher is done."""
        cfg = self.config
        next_kill, next_purge = cfg.kill_every, cfg.purge_every
        purging: threading.Thread | None = None
        while publisher.poll() is None:
            time.sleep(0.2)
            self.revive()
            elapsed = time.monotonic() - self.t0
            if elapsed >= next_kill:
                self.kill_one()
                next_kill += cfg.kill_every
            if elapsed >= next_purge:
                next_purge += cfg.purge_every
                if purging is None or not purging.is_alive():
                    purging = threading.Thread(target=self.purge, name="purge")
                    purging.start()
                else:
                    self.events["purge skipped (the previous one still ran)"] = (
                        self.events.get("purge skipped (the previous one still ran)", 0) + 1
                    )
        if purging is not None:
            purging.join()

    def revive(self) -> None:
        """A runqueue that exited by itself is started again (a process manager would)."""
        if self.runqueue is not None and not self.runqueue.alive:
            self.events["runqueue exited by itself (started again)"] = (
                self.events.get("runqueue exited by itself (started again)", 0) + 1
            )
            self.runqueue.log.close()
            self.start_runqueue()
