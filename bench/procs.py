"""The worker commands under test, started and stopped as process trees, with the RSS and
CPU time of every process they start (sampled from /proc) and the statements they send
(counted at the driver by bench/stmtcount.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench import stmtcount
from bench.common import LOG_DIR, MANAGE, OURS_PY, OURS_VARIANTS, PEER_POLL, PEERS_PY, RAW, system_env


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

    @property
    def statements_dir(self) -> Path:
        return LOG_DIR / "statements" / f"{self.system}-{self.variant}-{self.workers}"

    def start(self) -> Workers:
        # Every process of the command counts its statements into a file of this folder.
        self.statements_dir.mkdir(parents=True, exist_ok=True)
        for old in self.statements_dir.iterdir():
            old.unlink()
        env = system_env(
            self.system, self.workers, **{stmtcount.ENV: str(self.statements_dir)}, **self.extra_env
        )
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

    def sample(self) -> tuple[float, dict[str, int]]:
        """CPU seconds of the command's live processes, and the statements (by kind) of all it
        ever started, so far."""
        return cpu_seconds(self.tree()), stmtcount.kinds(self.statements_dir)

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
    """User + system CPU time used so far by these processes (all their threads) and by their
    children that have exited and been waited for: a worker process that is recycled mid-drain
    (django-q2 replaces its workers every 500 tasks) moves its time into its parent's."""
    ticks = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += sum(int(value) for value in fields[11:15])  # utime, stime, cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0
